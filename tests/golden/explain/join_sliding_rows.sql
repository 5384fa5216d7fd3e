SELECT l.ad_id, l.user_id, r.price, window_start, window_end
FROM clicks [RANGE 1 SECOND SLIDE 100 MILLISECONDS] AS l
JOIN views [RANGE 1 SECOND SLIDE 100 MILLISECONDS] AS r
  ON l.ad_id = r.ad_id AND r.price > 10
