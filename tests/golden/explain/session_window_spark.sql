SELECT session_window.start, session_window.end, symbol, COUNT(*) AS trades, SUM(volume) AS volume
FROM trades
WHERE price > 0
GROUP BY session_window(ts, '30 seconds'), symbol
