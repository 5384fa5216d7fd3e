SELECT l.ad_id, window_start, COUNT(*) AS n, SUM(r.price) AS spend
FROM clicks [RANGE 1 SECOND] AS l JOIN views [RANGE 1 SECOND] AS r ON l.ad_id = r.ad_id
GROUP BY l.ad_id
