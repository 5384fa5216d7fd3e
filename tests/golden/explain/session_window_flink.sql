SELECT window_start, window_end, symbol, COUNT(*) AS trades, SUM(volume) AS volume
FROM TABLE(SESSION(TABLE trades PARTITION BY symbol, DESCRIPTOR(ts), INTERVAL '30' SECOND))
WHERE price > 0
GROUP BY window_start, window_end, symbol
