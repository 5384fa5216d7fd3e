-- A VWAP query over a stream of trades (`make run` runs it on local Spark). Try:
--   mangonel explain examples/trades.sql
--   mangonel run examples/trades.sql --tuples 2000000 --keys 20 --delay '200 milliseconds'
CREATE STREAM trades (ts TIMESTAMP, symbol STRING, price DOUBLE, volume BIGINT)
  WITH (event_time = 'ts', watermark = '500 milliseconds');

SELECT symbol, window_start, window_end,
       COUNT(*) AS n, AVG(price) AS avg_price,
       SUM(price * volume) / SUM(volume) AS vwap
FROM trades [RANGE 1 SECOND SLIDE 10 MILLISECONDS]
WHERE volume > 0
GROUP BY symbol
