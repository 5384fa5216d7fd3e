SELECT device, window_end, MEDIAN(temp) AS median_temp, COUNT(DISTINCT temp) AS readings
FROM sensors [ROWS 1024 SLIDE 256]
GROUP BY device
