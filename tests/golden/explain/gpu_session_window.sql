SELECT device, window_end, AVG(temp) AS mean_temp
FROM sensors [SESSION GAP 5 SECONDS WATERMARK 1 SECOND]
GROUP BY device
