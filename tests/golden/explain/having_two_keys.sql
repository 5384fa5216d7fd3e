SELECT symbol, venue, window_start, SUM(volume) AS total
FROM trades [RANGE 1 HOUR SLIDE 15 MINUTES WATERMARK 30 SECONDS]
WHERE price BETWEEN 1 AND 1000 AND venue IN (1, 2, 3)
GROUP BY symbol, venue
HAVING SUM(volume) > 1000 AND COUNT(*) >= 10
