SELECT symbol, window_start, SUM(volume) AS total, MAX(price) - MIN(price) AS spread
FROM trades [RANGE 1 SECOND SLIDE 100 MILLISECONDS]
WHERE price > 0
GROUP BY symbol
HAVING symbol <> 'X' AND SUM(volume) > 10
