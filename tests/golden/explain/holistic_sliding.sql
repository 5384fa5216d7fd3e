SELECT symbol, window_end, MEDIAN(price) AS median_price,
       PERCENTILE_CONT(0.9) WITHIN GROUP (ORDER BY price) AS p90,
       PERCENTILE_DISC(0.25) WITHIN GROUP (ORDER BY volume) AS q1_volume,
       COUNT(DISTINCT venue) AS venues, AVG(price) AS mean_price
FROM trades [RANGE 1 SECOND SLIDE 10 MILLISECONDS]
GROUP BY symbol
HAVING PERCENTILE(price, 0.5) > AVG(price)
