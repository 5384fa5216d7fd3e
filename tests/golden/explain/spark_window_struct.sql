SELECT window, symbol, SUM(volume) AS volume
FROM trades
GROUP BY window(ts, '1 second', '100 milliseconds'), symbol
