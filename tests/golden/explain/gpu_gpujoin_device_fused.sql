SELECT l.ad_id, window_start, COUNT(*) AS n, SUM(l.bid * r.price) AS spend
FROM clicks [RANGE 1 SECOND] AS l
JOIN views [RANGE 1 SECOND WATERMARK 2 SECONDS] AS r ON l.ad_id = r.ad_id
WHERE l.bid > 0
GROUP BY l.ad_id
HAVING COUNT(*) > 2
