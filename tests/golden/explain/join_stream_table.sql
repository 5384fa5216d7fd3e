SELECT c.ad_id, a.campaign, window_start, COUNT(*)
FROM clicks [RANGE 1 MINUTE] AS c
JOIN ads AS a ON c.ad_id = a.ad_id
GROUP BY c.ad_id, a.campaign
