SELECT l.ad_id, window_start, COUNT(*) AS n, SUM(r.price) AS spend, MAX(l.ad_id) AS top
FROM clicks [RANGE 1 SECOND SLIDE 10 MILLISECONDS] AS l
JOIN views [RANGE 1 SECOND SLIDE 10 MILLISECONDS] AS r ON l.ad_id = r.ad_id
GROUP BY l.ad_id
