SELECT device, window_start,
       VAR_POP(temp) AS vp, VAR_SAMP(temp) AS vs, STDDEV_POP(temp) AS sp, STDDEV(temp) AS ss,
       COUNT(temp) AS readings, SUM(CASE WHEN ok THEN 1 ELSE 0 END) AS healthy
FROM sensors [RANGE 1 SECOND SLIDE 100 MICROSECONDS]
GROUP BY device
