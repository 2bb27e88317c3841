-- +goose Up
-- Sale lifecycle for admins (issue 14): a product may be paused (reserve.lua
-- refuses while the flag is set in Redis, written from here by the gateway),
-- sale_version orders the writes of a product's terms to Redis (sale.lua keeps
-- the latest), and admin_audit records every admin change: who, when, what.
-- A sale open until sold out stores sale_end = 9999-12-31 23:59:59 (the API
-- shows saleEnd null); every reader of sale_end keeps working unchanged.
-- Runs on MariaDB 10.11 and MySQL 8.
ALTER TABLE product
  ADD COLUMN paused       TINYINT(1) NOT NULL DEFAULT 0 AFTER sale_end,
  ADD COLUMN sale_version BIGINT     NOT NULL DEFAULT 0 AFTER paused;

CREATE TABLE admin_audit (
  id         BIGINT      NOT NULL AUTO_INCREMENT,
  at         DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  admin_id   BIGINT      NOT NULL,
  action     VARCHAR(32) NOT NULL,
  product_id BIGINT      NULL,
  `change`   JSON        NOT NULL,
  PRIMARY KEY (id),
  KEY idx_audit_product (product_id, id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- +goose Down
DROP TABLE admin_audit;
ALTER TABLE product
  DROP COLUMN sale_version,
  DROP COLUMN paused;
