-- Bad statements and the errors they get: one case per `-- name:` line, run by
-- tests/test_errors_golden.py in a fresh catalog holding
--   STREAM trades (ts TIMESTAMP, symbol STRING, price DOUBLE, volume BIGINT, venue INT)
--          WITH (event_time = 'ts', watermark = '500 milliseconds')
--   STREAM clicks (event_time TIMESTAMP, user_id BIGINT) WITH (event_time = 'event_time')
--   TABLE symbols (symbol STRING, sector STRING)
-- Lines and columns in the expected messages count from each case's first line.

-- name: unknown_stream
SELECT COUNT(*) FROM trade [RANGE 1 SECOND]

-- name: unknown_column
SELECT symbol, AVG(prize)
FROM trades [RANGE 1 SECOND]
GROUP BY symbol

-- name: unknown_column_in_group_by
SELECT COUNT(*) FROM trades [RANGE 1 SECOND] GROUP BY sector

-- name: unknown_qualifier
SELECT COUNT(*) FROM trades [RANGE 1 SECOND] AS t WHERE x.price > 0

-- name: aggregate_in_where
SELECT COUNT(*)
FROM trades [RANGE 1 SECOND]
WHERE SUM(volume) > 100

-- name: non_grouped_column_in_select
SELECT symbol, price, COUNT(*) FROM trades [RANGE 1 SECOND] GROUP BY symbol

-- name: non_grouped_column_without_group_by
SELECT price, COUNT(*) FROM trades [RANGE 1 SECOND]

-- name: having_non_aggregate_without_group_by
SELECT COUNT(*) FROM trades [RANGE 1 SECOND] HAVING price > 10

-- name: having_not_boolean
SELECT COUNT(*) FROM trades [RANGE 1 SECOND] HAVING COUNT(*)

-- name: where_not_boolean
SELECT COUNT(*) FROM trades [RANGE 1 SECOND] WHERE volume

-- name: zero_range
SELECT COUNT(*) FROM trades [RANGE 0 SECONDS]

-- name: negative_range
SELECT COUNT(*) FROM trades [RANGE -1 SECOND]

-- name: zero_slide
SELECT COUNT(*) FROM trades [RANGE 1 SECOND SLIDE 0 ms]

-- name: slide_larger_than_range
SELECT COUNT(*) FROM trades [RANGE 1 SECOND SLIDE 2 SECONDS]

-- name: rows_zero
SELECT COUNT(*) FROM trades [ROWS 0]

-- name: rows_slide_larger_than_rows
SELECT COUNT(*) FROM trades [ROWS 10 SLIDE 20]

-- name: rows_with_a_duration
SELECT COUNT(*) FROM trades [ROWS 10 SECONDS]

-- name: negative_watermark
SELECT COUNT(*) FROM trades [RANGE 1 SECOND WATERMARK -5 SECONDS]

-- name: malformed_duration_unknown_unit
SELECT COUNT(*) FROM trades [RANGE 1 FORTNIGHT]

-- name: malformed_duration_without_number
SELECT COUNT(*) FROM trades [RANGE SECOND]

-- name: malformed_duration_fraction_of_microsecond
SELECT COUNT(*) FROM trades [RANGE 1.5 US]

-- name: malformed_duration_without_unit
SELECT COUNT(*) FROM trades [RANGE 1 SLIDE 1 SECOND]

-- name: malformed_interval
SELECT COUNT(*) FROM trades [RANGE INTERVAL 5 MINUTE]

-- name: window_clause_without_kind
SELECT COUNT(*) FROM trades [1 SECOND]

-- name: two_window_clauses
SELECT COUNT(*) FROM trades [RANGE 1 SECOND] [RANGE 2 SECONDS]

-- name: window_clause_on_subquery
SELECT COUNT(*) FROM (SELECT price FROM trades) [RANGE 1 SECOND]

-- name: window_clause_on_static_table
SELECT COUNT(*) FROM symbols [RANGE 1 SECOND]

-- name: static_table_without_window
SELECT COUNT(*) FROM symbols

-- name: stream_without_window_or_aggregate
SELECT symbol, price FROM trades

-- name: aggregate_without_window
SELECT symbol, COUNT(*) FROM trades GROUP BY symbol

-- name: unsupported_function
SELECT symbol, COUNT(*) FROM trades [RANGE 1 SECOND] WHERE UPPER(symbol) = 'ACME' GROUP BY symbol

-- name: unsupported_aggregate
SELECT FIRST(price) FROM trades [RANGE 1 SECOND]

-- name: sum_of_string
SELECT SUM(symbol) FROM trades [RANGE 1 SECOND]

-- name: avg_of_timestamp
SELECT AVG(ts) FROM trades [RANGE 1 SECOND]

-- name: bool_and_of_bigint
SELECT BOOL_AND(volume) FROM trades [RANGE 1 SECOND]

-- name: any_of_double
SELECT symbol, ANY(price) FROM trades [RANGE 1 SECOND] GROUP BY symbol

-- name: string_compared_with_number
SELECT COUNT(*) FROM trades [RANGE 1 SECOND] WHERE price = 'cheap'

-- name: count_distinct
SELECT COUNT(DISTINCT symbol) FROM trades [RANGE 1 SECOND]

-- name: nested_aggregates
SELECT SUM(MAX(price)) FROM trades [RANGE 1 SECOND]

-- name: window_start_inside_aggregate
SELECT MAX(window_start) FROM trades [RANGE 1 SECOND]

-- name: window_start_in_where
SELECT COUNT(*) FROM trades [RANGE 1 SECOND] WHERE window_start > ts

-- name: group_by_expression
SELECT COUNT(*) FROM trades [RANGE 1 SECOND] GROUP BY venue % 10

-- name: group_by_position
SELECT symbol, COUNT(*) FROM trades [RANGE 1 SECOND] GROUP BY 1

-- name: group_by_double_column
SELECT price, COUNT(*) FROM trades [RANGE 1 SECOND] GROUP BY price

-- name: spark_window_bad_interval_string
SELECT window.start, COUNT(*) FROM trades GROUP BY window(ts, '1 parsec')

-- name: spark_window_outside_group_by
SELECT window(ts, '1 second'), COUNT(*) FROM trades

-- name: spark_window_columns_without_a_window
SELECT window.start, COUNT(*) FROM trades [RANGE 1 SECOND]

-- name: spark_window_not_the_event_time
SELECT COUNT(*) FROM trades GROUP BY window(volume, '1 second')

-- name: spark_window_slide_longer_than_window
SELECT COUNT(*) FROM trades GROUP BY window(ts, '1 second', '2 seconds')

-- name: spark_window_start_time
SELECT COUNT(*) FROM trades GROUP BY window(ts, '1 minute', '1 minute', '15 seconds')

-- name: spark_window_and_window_clause
SELECT COUNT(*) FROM trades [RANGE 1 SECOND] GROUP BY window(ts, '1 second')

-- name: spark_window_unknown_field
SELECT window.middle, COUNT(*) FROM trades GROUP BY window(ts, '1 second')

-- name: spark_window_time_of_a_column
SELECT window_time(ts), COUNT(*) FROM trades GROUP BY window(ts, '1 second')

-- name: spark_window_too_many_panes
SELECT COUNT(*) FROM trades GROUP BY window(ts, '1 day', '1 microsecond')

-- name: flink_hop_size_not_a_multiple_of_slide
SELECT window_start, COUNT(*)
FROM TABLE(HOP(TABLE trades, DESCRIPTOR(ts), INTERVAL '300' MILLISECOND, INTERVAL '1' SECOND))
GROUP BY window_start, window_end

-- name: flink_cumulate_size_not_a_multiple_of_step
SELECT window_start, COUNT(*)
FROM TABLE(CUMULATE(TABLE trades, DESCRIPTOR(ts), INTERVAL '7' SECOND, INTERVAL '1' MINUTE))
GROUP BY window_start, window_end

-- name: flink_group_by_without_window_end
SELECT window_start, symbol, COUNT(*)
FROM TABLE(TUMBLE(TABLE trades, DESCRIPTOR(ts), INTERVAL '1' SECOND))
GROUP BY window_start, symbol

-- name: flink_descriptor_not_the_event_time
SELECT window_start, COUNT(*)
FROM TABLE(TUMBLE(TABLE trades, DESCRIPTOR(price), INTERVAL '1' SECOND))
GROUP BY window_start, window_end

-- name: flink_bad_interval
SELECT window_start, COUNT(*)
FROM TABLE(TUMBLE(TABLE trades, DESCRIPTOR(ts), INTERVAL 'one' SECOND))
GROUP BY window_start, window_end

-- name: flink_unknown_named_argument
SELECT window_start, COUNT(*)
FROM TABLE(TUMBLE(DATA => TABLE trades, TIMECOL => DESCRIPTOR(ts), WIDTH => INTERVAL '1' SECOND))
GROUP BY window_start, window_end

-- name: flink_missing_size
SELECT window_start, COUNT(*)
FROM TABLE(HOP(TABLE trades, DESCRIPTOR(ts), INTERVAL '1' SECOND))
GROUP BY window_start, window_end

-- name: flink_partition_by_on_tumble
SELECT window_start, COUNT(*)
FROM TABLE(TUMBLE(TABLE trades PARTITION BY symbol, DESCRIPTOR(ts), INTERVAL '1' SECOND))
GROUP BY window_start, window_end

-- name: flink_offset
SELECT window_start, COUNT(*)
FROM TABLE(TUMBLE(TABLE trades, DESCRIPTOR(ts), INTERVAL '1' HOUR, INTERVAL '15' MINUTE))
GROUP BY window_start, window_end

-- name: flink_table_function_outside_table
SELECT window_start, COUNT(*)
FROM TUMBLE(TABLE trades, DESCRIPTOR(ts), INTERVAL '1' SECOND)
GROUP BY window_start, window_end

-- name: flink_cumulate_holistic
SELECT window_end, MEDIAN(price)
FROM TABLE(CUMULATE(TABLE trades, DESCRIPTOR(ts), INTERVAL '1' SECOND, INTERVAL '1' MINUTE))
GROUP BY window_start, window_end

-- name: spark_window_over_join
SELECT t.venue, COUNT(*)
FROM trades AS t JOIN clicks AS c ON t.venue = c.user_id
GROUP BY window(t.ts, '1 second'), t.venue

-- name: flink_window_over_join
SELECT window_start, COUNT(*)
FROM TABLE(TUMBLE(TABLE trades, DESCRIPTOR(ts), INTERVAL '1' SECOND)) AS t
JOIN clicks [RANGE 1 SECOND] AS c ON t.volume = c.user_id
GROUP BY window_start, window_end

-- name: duplicate_output_names
SELECT COUNT(*) AS n, SUM(volume) AS N FROM trades [RANGE 1 SECOND]

-- name: duplicate_generated_output_names
SELECT symbol, symbol, COUNT(*) FROM trades [RANGE 1 SECOND] GROUP BY symbol

-- name: window_function
SELECT SUM(price) OVER (PARTITION BY symbol ORDER BY ts) FROM trades [RANGE 1 SECOND]

-- name: select_without_from
SELECT 1 + 1

-- name: select_star
SELECT * FROM trades [RANGE 1 SECOND]

-- name: join_different_windows
SELECT COUNT(*)
FROM trades [RANGE 1 SECOND] AS t
JOIN clicks [RANGE 2 SECONDS SLIDE 1 SECOND] AS c ON t.venue = c.user_id

-- name: join_stream_without_window
SELECT COUNT(*)
FROM trades [RANGE 1 SECOND] AS t
JOIN clicks AS c ON t.venue = c.user_id

-- name: join_without_key_equality
SELECT COUNT(*)
FROM trades [RANGE 1 SECOND] AS t
JOIN clicks [RANGE 1 SECOND] AS c ON t.volume > c.user_id

-- name: join_equality_within_one_side
SELECT COUNT(*)
FROM trades [RANGE 1 SECOND] AS t
JOIN clicks [RANGE 1 SECOND] AS c ON t.volume = t.venue

-- name: join_key_types_differ
SELECT COUNT(*)
FROM trades [RANGE 1 SECOND] AS t
JOIN clicks [RANGE 1 SECOND] AS c ON t.symbol = c.user_id

-- name: join_unqualified_column
SELECT COUNT(*)
FROM trades [RANGE 1 SECOND] AS t
JOIN clicks [RANGE 1 SECOND] AS c ON t.venue = c.user_id
GROUP BY symbol

-- name: join_unknown_alias
SELECT x.symbol, COUNT(*)
FROM trades [RANGE 1 SECOND] AS t
JOIN clicks [RANGE 1 SECOND] AS c ON t.venue = c.user_id
GROUP BY t.symbol

-- name: join_unknown_column_of_side
SELECT t.user_id, COUNT(*)
FROM trades [RANGE 1 SECOND] AS t
JOIN clicks [RANGE 1 SECOND] AS c ON t.venue = c.user_id

-- name: join_colliding_output_names
SELECT t.symbol, s.symbol, window_start
FROM trades [RANGE 1 SECOND] AS t
JOIN symbols AS s ON t.symbol = s.symbol

-- name: join_stream_with_itself_two_watermarks
SELECT l.user_id, window_start
FROM clicks [RANGE 1 SECOND] AS l
JOIN clicks [RANGE 1 SECOND WATERMARK 2 SECONDS] AS r ON l.user_id = r.user_id

-- name: join_table_on_both_sides
SELECT s.sector FROM symbols AS s JOIN symbols AS x ON s.symbol = x.symbol

-- name: join_window_clause_on_table
SELECT COUNT(*)
FROM trades [RANGE 1 SECOND] AS t
JOIN symbols [RANGE 1 SECOND] AS s ON t.symbol = s.symbol

-- name: join_right_keeps_table_rows
SELECT COUNT(*)
FROM trades [RANGE 1 SECOND] AS t
RIGHT JOIN symbols AS s ON t.symbol = s.symbol

-- name: join_same_alias
SELECT COUNT(*) FROM trades [RANGE 1 SECOND] JOIN trades [RANGE 1 SECOND] ON venue = venue

-- name: join_using
SELECT COUNT(*)
FROM trades [RANGE 1 SECOND] AS t
JOIN clicks [RANGE 1 SECOND] AS c USING (user_id)

-- name: join_cross
SELECT COUNT(*) FROM trades [RANGE 1 SECOND] AS t CROSS JOIN clicks [RANGE 1 SECOND] AS c

-- name: join_comma
SELECT COUNT(*) FROM trades [RANGE 1 SECOND] AS t, clicks [RANGE 1 SECOND] AS c

-- name: join_three_inputs
SELECT COUNT(*)
FROM trades [RANGE 1 SECOND] AS t
JOIN clicks [RANGE 1 SECOND] AS c ON t.venue = c.user_id
JOIN symbols AS s ON t.symbol = s.symbol

-- name: join_count_windows
SELECT COUNT(*)
FROM trades [ROWS 100] AS t
JOIN clicks [ROWS 100] AS c ON t.venue = c.user_id

-- name: join_window_bound_in_on
SELECT COUNT(*)
FROM trades [RANGE 1 SECOND] AS t
JOIN clicks [RANGE 1 SECOND] AS c
  ON t.venue = c.user_id AND t.window_start = c.window_start

-- name: join_aggregate_without_window
SELECT COUNT(*) FROM trades AS t JOIN symbols AS s ON t.symbol = s.symbol

-- name: join_having_without_aggregates
SELECT t.price, s.sector
FROM trades [RANGE 1 SECOND] AS t
JOIN symbols AS s ON t.symbol = s.symbol
HAVING t.price > 1

-- name: join_aggregate_in_on
SELECT COUNT(*)
FROM trades [RANGE 1 SECOND] AS t
JOIN clicks [RANGE 1 SECOND] AS c ON t.venue = c.user_id AND SUM(t.price) > 1

-- name: join_session_windows
SELECT t.price
FROM trades [SESSION GAP 1 SECOND] AS t
JOIN clicks [SESSION GAP 1 SECOND] AS c ON t.venue = c.user_id

-- name: flink_join_different_windows
SELECT t.price, c.user_id
FROM TABLE(TUMBLE(TABLE trades, DESCRIPTOR(ts), INTERVAL '1' SECOND)) AS t
JOIN TABLE(HOP(TABLE clicks, DESCRIPTOR(event_time), INTERVAL '500' MILLISECOND, INTERVAL '1' SECOND)) AS c
  ON t.venue = c.user_id AND t.window_start = c.window_start AND t.window_end = c.window_end

-- name: flink_join_different_sizes
SELECT t.price, c.user_id
FROM TABLE(TUMBLE(TABLE trades, DESCRIPTOR(ts), INTERVAL '1' SECOND)) AS t
JOIN TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(event_time), INTERVAL '2' SECOND)) AS c
  ON t.venue = c.user_id AND t.window_start = c.window_start AND t.window_end = c.window_end

-- name: flink_join_without_window_end_equality
SELECT t.price, c.user_id
FROM TABLE(TUMBLE(TABLE trades, DESCRIPTOR(ts), INTERVAL '1' SECOND)) AS t
JOIN TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(event_time), INTERVAL '1' SECOND)) AS c
  ON t.venue = c.user_id AND t.window_start = c.window_start

-- name: flink_join_without_key_equality
SELECT t.price, c.user_id
FROM TABLE(TUMBLE(TABLE trades, DESCRIPTOR(ts), INTERVAL '1' SECOND)) AS t
JOIN TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(event_time), INTERVAL '1' SECOND)) AS c
  ON t.window_start = c.window_start AND t.window_end = c.window_end

-- name: flink_join_crossed_bounds_in_on
SELECT t.price, c.user_id
FROM TABLE(TUMBLE(TABLE trades, DESCRIPTOR(ts), INTERVAL '1' SECOND)) AS t
JOIN TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(event_time), INTERVAL '1' SECOND)) AS c
  ON t.venue = c.user_id AND t.window_start = c.window_end AND t.window_end = c.window_end

-- name: flink_join_group_by_without_bounds
SELECT t.venue, COUNT(*) AS n
FROM TABLE(TUMBLE(TABLE trades, DESCRIPTOR(ts), INTERVAL '1' SECOND)) AS t
JOIN TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(event_time), INTERVAL '1' SECOND)) AS c
  ON t.venue = c.user_id AND t.window_start = c.window_start AND t.window_end = c.window_end
GROUP BY t.venue

-- name: flink_join_group_by_bounds_alone
SELECT t.window_start
FROM TABLE(TUMBLE(TABLE trades, DESCRIPTOR(ts), INTERVAL '1' SECOND)) AS t
JOIN TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(event_time), INTERVAL '1' SECOND)) AS c
  ON t.venue = c.user_id AND t.window_start = c.window_start AND t.window_end = c.window_end
GROUP BY t.window_start, t.window_end

-- name: flink_join_cumulate
SELECT t.price, c.user_id
FROM TABLE(CUMULATE(TABLE trades, DESCRIPTOR(ts), INTERVAL '1' SECOND, INTERVAL '1' MINUTE)) AS t
JOIN TABLE(CUMULATE(TABLE clicks, DESCRIPTOR(event_time), INTERVAL '1' SECOND, INTERVAL '1' MINUTE)) AS c
  ON t.venue = c.user_id AND t.window_start = c.window_start AND t.window_end = c.window_end

-- name: flink_join_session
SELECT t.price, c.user_id
FROM TABLE(SESSION(TABLE trades PARTITION BY venue, DESCRIPTOR(ts), INTERVAL '1' SECOND)) AS t
JOIN TABLE(SESSION(TABLE clicks PARTITION BY user_id, DESCRIPTOR(event_time), INTERVAL '1' SECOND)) AS c
  ON t.venue = c.user_id AND t.window_start = c.window_start AND t.window_end = c.window_end

-- name: flink_join_with_a_table
SELECT t.price, s.sector
FROM TABLE(TUMBLE(TABLE trades, DESCRIPTOR(ts), INTERVAL '1' SECOND)) AS t
JOIN symbols AS s ON t.symbol = s.symbol

-- name: flink_join_filtering_subquery
SELECT t.price, c.user_id
FROM (SELECT * FROM TABLE(TUMBLE(TABLE trades, DESCRIPTOR(ts), INTERVAL '1' SECOND)) WHERE price > 1) t
JOIN (SELECT * FROM TABLE(TUMBLE(TABLE clicks, DESCRIPTOR(event_time), INTERVAL '1' SECOND))) c
  ON t.venue = c.user_id AND t.window_start = c.window_start AND t.window_end = c.window_end

-- name: order_by
SELECT symbol, COUNT(*) AS n FROM trades [RANGE 1 SECOND] GROUP BY symbol ORDER BY n DESC

-- name: limit
SELECT COUNT(*) FROM trades [RANGE 1 SECOND] LIMIT 10

-- name: distinct
SELECT DISTINCT symbol FROM trades [RANGE 1 SECOND] GROUP BY symbol

-- name: subquery_in_where
SELECT COUNT(*) FROM trades [RANGE 1 SECOND] WHERE symbol IN (SELECT symbol FROM symbols)

-- name: subquery_as_join_side
SELECT t.symbol FROM trades [RANGE 1 SECOND] AS t
JOIN (SELECT * FROM clicks) AS c ON t.volume = c.user_id

-- name: union
SELECT COUNT(*) FROM trades [RANGE 1 SECOND]
UNION ALL
SELECT COUNT(*) FROM clicks [RANGE 1 SECOND]

-- name: syntax_error
SELECT COUNT(*
FROM trades [RANGE 1 SECOND]

-- name: syntax_error_unknown_token
SELECT COUNT(*) FROM trades [RANGE 1 SECOND] WHERE price >> > 1

-- name: two_statements
SELECT COUNT(*) FROM trades [RANGE 1 SECOND]; SELECT COUNT(*) FROM clicks [ROWS 5]

-- name: stream_named_by_an_sql_keyword
CREATE STREAM select (ts TIMESTAMP, v INT) WITH (event_time = 'ts')

-- name: stream_column_named_as_a_window_bound
CREATE STREAM quotes (ts TIMESTAMP, window_start TIMESTAMP) WITH (event_time = 'ts')

-- name: create_stream_unknown_type
CREATE STREAM quotes (ts TIMESTAMP, bid DECIMAL) WITH (event_time = 'ts')

-- name: create_stream_without_event_time
CREATE STREAM quotes (ts TIMESTAMP, bid DOUBLE)

-- name: create_stream_event_time_not_timestamp
CREATE STREAM quotes (ts BIGINT, bid DOUBLE) WITH (event_time = 'ts')

-- name: create_stream_bad_watermark
CREATE STREAM quotes (ts TIMESTAMP, bid DOUBLE)
WITH (event_time = 'ts', watermark = 'half a second')

-- name: create_stream_syntax_error
CREATE STREAM quotes (ts TIMESTAMP bid DOUBLE) WITH (event_time = 'ts')

-- name: named_window_definition
SELECT COUNT(*) FROM trades [RANGE 1 SECOND] WINDOW w AS (PARTITION BY symbol)

-- name: unknown_function_on_a_column
SELECT symbol, FROBNICATE(price) FROM trades [RANGE 1 SECOND] GROUP BY symbol

-- name: window_clause_after_where
SELECT COUNT(*) FROM trades WHERE price > 0 [RANGE 1 SECOND]

-- name: window_clause_after_group_by
SELECT symbol, COUNT(*)
FROM trades
GROUP BY symbol [ROWS 100 SLIDE 10]

-- name: duplicate_names_of_different_outputs
SELECT SUM(price), sum(price) AS total, sum(price) FROM trades [RANGE 1 SECOND]

-- name: range_too_long
SELECT COUNT(*) FROM trades [RANGE 1000000000000000000 DAYS]

-- name: too_many_panes_per_window
SELECT COUNT(*) FROM trades [RANGE 1 DAY SLIDE 1 MICROSECOND]

-- name: too_many_rows_per_window
SELECT COUNT(*) FROM trades [ROWS 100000000000000000000]

-- name: create_stream_misspelt_option
CREATE STREAM quotes (ts TIMESTAMP, bid DOUBLE)
WITH (event_time = 'ts', watermak = '10 seconds')

-- name: create_stream_unknown_source
CREATE STREAM quotes (ts TIMESTAMP, bid DOUBLE)
WITH (event_time = 'ts', source = 'kafak', topic = 'quotes')

-- name: create_stream_columns_differing_in_case
CREATE STREAM quotes (ts TIMESTAMP, k BIGINT, K BIGINT) WITH (event_time = 'ts')

-- name: timestamp_compared_with_a_string
SELECT COUNT(*) FROM trades [RANGE 1 SECOND] WHERE ts > '2026-01-01 00:00:00'

-- name: timestamp_literal_unreadable
SELECT COUNT(*) FROM trades [RANGE 1 SECOND] WHERE ts > TIMESTAMP '2026-02-30 00:00:00'

-- name: percentile_fraction_above_one
SELECT PERCENTILE(price, 1.5) FROM trades [RANGE 1 SECOND]

-- name: percentile_fraction_negative
SELECT PERCENTILE_CONT(-0.1) WITHIN GROUP (ORDER BY price) FROM trades [RANGE 1 SECOND]

-- name: percentile_fraction_not_a_literal
SELECT PERCENTILE(price, volume) FROM trades [RANGE 1 SECOND]

-- name: percentile_fraction_array_empty
SELECT PERCENTILE(price, ARRAY()) FROM trades [RANGE 1 SECOND]

-- name: percentile_fraction_array_element_above_one
SELECT PERCENTILE_CONT(ARRAY(0.1, 1.5)) WITHIN GROUP (ORDER BY price) FROM trades [RANGE 1 SECOND]

-- name: percentile_array_in_an_expression
SELECT PERCENTILE(price, ARRAY(0.1, 0.9)) * 2 FROM trades [RANGE 1 SECOND]

-- name: percentile_of_string
SELECT PERCENTILE_DISC(0.5) WITHIN GROUP (ORDER BY symbol) FROM trades [RANGE 1 SECOND]

-- name: median_of_timestamp
SELECT MEDIAN(ts) FROM trades [RANGE 1 SECOND]

-- name: percentile_cont_without_within_group
SELECT PERCENTILE_CONT(0.5) FROM trades [RANGE 1 SECOND]

-- name: within_group_descending
SELECT PERCENTILE_CONT(0.5) WITHIN GROUP (ORDER BY price DESC) FROM trades [RANGE 1 SECOND]

-- name: within_group_two_orderings
SELECT PERCENTILE_DISC(0.5) WITHIN GROUP (ORDER BY price, volume) FROM trades [RANGE 1 SECOND]

-- name: within_group_on_median
SELECT MEDIAN(price) WITHIN GROUP (ORDER BY price) FROM trades [RANGE 1 SECOND]

-- name: count_distinct_two_arguments
SELECT COUNT(DISTINCT price, volume) FROM trades [RANGE 1 SECOND]

-- name: sum_distinct
SELECT SUM(DISTINCT price) FROM trades [RANGE 1 SECOND]

-- name: approx_count_distinct_rsd_too_large
SELECT APPROX_COUNT_DISTINCT(volume, 0.5) FROM trades [RANGE 1 SECOND]

-- name: approx_count_distinct_rsd_too_small
SELECT APPROX_COUNT_DISTINCT(volume, 0.0001) FROM trades [RANGE 1 SECOND]

-- name: approx_count_distinct_rsd_not_a_literal
SELECT APPROX_COUNT_DISTINCT(volume, price) FROM trades [RANGE 1 SECOND]

-- name: approx_percentile_fraction_above_one
SELECT APPROX_PERCENTILE(price, 1.5) FROM trades [RANGE 1 SECOND]

-- name: approx_percentile_array_in_having
SELECT COUNT(*) FROM trades [RANGE 1 SECOND] HAVING PERCENTILE_APPROX(price, ARRAY(0.1, 0.9)) IS NULL

-- name: spark_window_struct_computed_with
SELECT COALESCE(window, window), COUNT(*) FROM trades GROUP BY window(ts, '1 second')

-- name: approx_percentile_accuracy_zero
SELECT APPROX_PERCENTILE(price, 0.5, 0) FROM trades [RANGE 1 SECOND]

-- name: approx_percentile_accuracy_not_an_integer
SELECT APPROX_PERCENTILE(price, 0.5, 100.5) FROM trades [RANGE 1 SECOND]

-- name: approx_percentile_of_string
SELECT APPROX_PERCENTILE(symbol, 0.5) FROM trades [RANGE 1 SECOND]

-- name: session_without_gap
SELECT COUNT(*) FROM trades [SESSION 30 SECONDS]

-- name: session_with_slide
SELECT symbol, COUNT(*) FROM trades [SESSION GAP 30 SECONDS SLIDE 1 SECOND] GROUP BY symbol

-- name: session_window_not_on_event_time
SELECT symbol, COUNT(*) FROM trades GROUP BY session_window(price, '30 seconds'), symbol

-- name: session_window_and_window_clause
SELECT COUNT(*) FROM trades [RANGE 1 SECOND] GROUP BY session_window(ts, '30 seconds')

-- name: flink_session_descriptor_not_event_time
SELECT symbol, COUNT(*) FROM TABLE(SESSION(TABLE trades PARTITION BY symbol, DESCRIPTOR(price), INTERVAL '30' SECOND)) GROUP BY window_start, window_end, symbol

-- name: flink_session_group_by_not_partition
SELECT venue, COUNT(*) FROM TABLE(SESSION(TABLE trades PARTITION BY symbol, DESCRIPTOR(ts), INTERVAL '30' SECOND)) GROUP BY window_start, window_end, venue

-- name: if_with_two_arguments
SELECT symbol, SUM(IF(price > 1, volume)) AS v FROM trades [RANGE 1 SECOND] GROUP BY symbol

-- name: double_quoted_string
SELECT symbol, COUNT(*) AS n FROM trades [RANGE 1 SECOND] WHERE symbol = "AAPL" GROUP BY symbol
