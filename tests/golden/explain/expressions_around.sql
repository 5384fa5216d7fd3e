SELECT symbol, window_end, ROUND(MAX(price) - MIN(price), 2) AS spread,
       COALESCE(SUM(volume), 0) * 2 AS double_volume
FROM trades [RANGE 10 SECONDS SLIDE 2 SECONDS]
WHERE NOT (symbol = 'HALT') AND price IS NOT NULL
GROUP BY symbol
