SELECT symbol, window_start, window_end, SUM(volume) AS volume_so_far, MAX(price) AS high
FROM TABLE(CUMULATE(TABLE trades, DESCRIPTOR(ts), INTERVAL '1' MINUTE, INTERVAL '1' HOUR))
GROUP BY window_start, window_end, symbol
