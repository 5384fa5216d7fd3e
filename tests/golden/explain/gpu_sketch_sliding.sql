SELECT symbol, window_end, APPROX_COUNT_DISTINCT(venue) AS venues,
       APPROX_PERCENTILE(price, 0.99, 1000) AS p99, PERCENTILE_APPROX(volume, 0.5) AS mid_volume,
       APPROX_PERCENTILE(venue, 0.9, 100) AS p90_venue, MEDIAN(price) AS median_price,
       SUM(volume) AS volume
FROM trades [RANGE 1 SECOND SLIDE 10 MILLISECONDS]
GROUP BY symbol
