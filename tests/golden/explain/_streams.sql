CREATE STREAM trades (ts TIMESTAMP, symbol STRING, price DOUBLE, volume BIGINT, venue INT)
  WITH (event_time = 'ts', watermark = '500 milliseconds');
CREATE STREAM sensors (ts TIMESTAMP, device BIGINT, temp FLOAT, ok BOOLEAN)
  WITH (event_time = 'ts', watermark = '2 seconds')
;
CREATE STREAM clicks (ts TIMESTAMP, ad_id BIGINT, user_id BIGINT, bid DOUBLE)
  WITH (event_time = 'ts');
CREATE STREAM views (ts TIMESTAMP, ad_id BIGINT, price DOUBLE)
  WITH (event_time = 'ts', watermark = '1 second');
CREATE TABLE ads (ad_id BIGINT, campaign STRING)
