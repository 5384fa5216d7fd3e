CREATE STREAM trades (ts TIMESTAMP, symbol STRING, price DOUBLE, volume BIGINT, venue INT)
  WITH (event_time = 'ts', watermark = '500 milliseconds');
CREATE STREAM sensors (ts TIMESTAMP, device BIGINT, temp FLOAT, ok BOOLEAN)
  WITH (event_time = 'ts', watermark = '2 seconds')
