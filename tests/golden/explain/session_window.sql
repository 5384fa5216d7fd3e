SELECT symbol, window_start, window_end, COUNT(*) AS trades, SUM(volume) AS volume
FROM trades [SESSION GAP 30 SECONDS]
WHERE price > 0
GROUP BY symbol
