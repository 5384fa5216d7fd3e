SELECT window_start, COUNT(*) AS n, MAX(price) AS high, MIN(price) AS low
FROM trades [RANGE INTERVAL '5' MINUTE]
