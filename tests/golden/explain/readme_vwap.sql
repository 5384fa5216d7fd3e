SELECT symbol, window_start, window_end,
       COUNT(*) AS n, AVG(price) AS avg_price,
       SUM(price * volume) / SUM(volume) AS vwap
FROM trades [RANGE 1 SECOND SLIDE 10 MILLISECONDS]
WHERE volume > 0
GROUP BY symbol
