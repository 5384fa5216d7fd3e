SELECT device, window_end, AVG(temp) AS mean_temp
FROM sensors [ROWS 1024 SLIDE 256]
GROUP BY device
