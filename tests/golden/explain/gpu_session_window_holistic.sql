SELECT symbol, window_start, window_end, MEDIAN(price) AS median_price, COUNT(DISTINCT venue) AS venues, SUM(volume) AS volume
FROM trades [SESSION GAP 30 SECONDS]
GROUP BY symbol
