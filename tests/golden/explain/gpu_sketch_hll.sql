SELECT symbol, window_end, APPROX_COUNT_DISTINCT(venue) AS venues, SUM(volume) AS volume
FROM trades [RANGE 1 SECOND SLIDE 10 MILLISECONDS]
GROUP BY symbol
