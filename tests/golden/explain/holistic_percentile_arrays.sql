SELECT symbol, PERCENTILE(price, ARRAY(0.25, 0.5, 0.75)) AS quartiles,
       PERCENTILE_DISC(ARRAY(0.9, 0.1)) WITHIN GROUP (ORDER BY volume) AS volume_deciles,
       APPROX_PERCENTILE(venue, ARRAY(0.5, 0.99), 1000) AS venue_median_p99
FROM trades [RANGE 1 SECOND SLIDE 100 MILLISECONDS]
GROUP BY symbol
