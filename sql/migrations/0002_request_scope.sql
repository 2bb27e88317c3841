-- +goose Up
-- requestIds are scoped per (user, product) end to end (issue 18). The Redis
-- idempotency record of a request lives in the product's shard, so the same
-- requestId sent for two products is two intents; the database now agrees, and
-- the writer no longer fails the second product's order as REQUEST_REUSED.
--
-- request_seq numbers the intents of one (user, product, requestId) over time:
-- 0 for the first; after the idempotency record's lifetime (the gateway's
-- RequestTTL, 24 h) the same requestId is a new intent, stored with the next
-- seq instead of being failed. Runs on MariaDB 10.11 and MySQL 8.
ALTER TABLE order_info
  ADD COLUMN request_seq INT NOT NULL DEFAULT 0 AFTER request_id,
  DROP INDEX uk_user_request,
  ADD UNIQUE KEY uk_user_product_request (user_id, product_id, request_id, request_seq);

-- +goose Down
ALTER TABLE order_info
  DROP INDEX uk_user_product_request,
  ADD UNIQUE KEY uk_user_request (user_id, request_id),
  DROP COLUMN request_seq;
