SELECT device, window_end, AVG(temp) AS mean_temp, BOOL_AND(ok) AS all_ok
FROM sensors [ROWS 1024 SLIDE 256]
GROUP BY device
HAVING COUNT(*) > 1
