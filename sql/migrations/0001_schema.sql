-- +goose Up
-- Stampede schema (SPEC §4). Runs on MariaDB 10.11 and MySQL 8.0.16+.
-- Amounts are integer minor units; times are DATETIME(3) in UTC.

CREATE TABLE product (
  id             BIGINT       NOT NULL AUTO_INCREMENT,
  name           VARCHAR(200) NOT NULL,
  price          BIGINT       NOT NULL,
  total          BIGINT       NOT NULL,
  per_user_limit INT          NOT NULL,
  max_per_order  INT          NOT NULL,
  shards         INT          NOT NULL DEFAULT 1,
  sale_start     DATETIME(3)  NOT NULL,
  sale_end       DATETIME(3)  NOT NULL,
  created_at     DATETIME(3)  NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  PRIMARY KEY (id),
  CONSTRAINT chk_product_price CHECK (price >= 0),
  CONSTRAINT chk_product_total CHECK (total >= 0)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE stock (
  product_id BIGINT      NOT NULL,
  available  BIGINT      NOT NULL,
  locked     BIGINT      NOT NULL DEFAULT 0,
  sold       BIGINT      NOT NULL DEFAULT 0,
  version    BIGINT      NOT NULL DEFAULT 0,
  updated_at DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  PRIMARY KEY (product_id),
  CONSTRAINT chk_stock_available CHECK (available >= 0),
  CONSTRAINT chk_stock_locked CHECK (locked >= 0),
  CONSTRAINT chk_stock_sold CHECK (sold >= 0)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE order_info (
  id           BIGINT      NOT NULL AUTO_INCREMENT,
  order_no     VARCHAR(40) NOT NULL,
  user_id      BIGINT      NOT NULL,
  request_id   VARCHAR(64) NOT NULL,
  product_id   BIGINT      NOT NULL,
  quantity     INT         NOT NULL,
  amount       BIGINT      NOT NULL,
  status       VARCHAR(16) NOT NULL,
  version      BIGINT      NOT NULL DEFAULT 1,
  close_reason VARCHAR(32) NULL,
  pay_deadline DATETIME(3) NULL,
  created_at   DATETIME(3) NOT NULL,
  updated_at   DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  PRIMARY KEY (id),
  UNIQUE KEY uk_order_no (order_no),
  UNIQUE KEY uk_user_request (user_id, request_id),
  KEY idx_user_created (user_id, created_at),
  KEY idx_status_deadline (status, pay_deadline),
  KEY idx_product_status (product_id, status),
  CONSTRAINT chk_order_quantity CHECK (quantity > 0)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE order_item (
  id           BIGINT       NOT NULL AUTO_INCREMENT,
  order_no     VARCHAR(40)  NOT NULL,
  product_id   BIGINT       NOT NULL,
  product_name VARCHAR(200) NOT NULL,
  unit_price   BIGINT       NOT NULL,
  quantity     INT          NOT NULL,
  amount       BIGINT       NOT NULL,
  PRIMARY KEY (id),
  UNIQUE KEY uk_item_order_product (order_no, product_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE stock_flow (
  id         BIGINT      NOT NULL AUTO_INCREMENT,
  biz_type   VARCHAR(16) NOT NULL,
  biz_no     VARCHAR(64) NOT NULL,
  product_id BIGINT      NOT NULL,
  quantity   BIGINT      NOT NULL,
  reason     VARCHAR(200) NULL,
  created_at DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  PRIMARY KEY (id),
  UNIQUE KEY uk_flow_biz (biz_type, biz_no),
  KEY idx_flow_product (product_id, biz_type)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE mq_outbox (
  id            BIGINT       NOT NULL AUTO_INCREMENT,
  event_id      VARCHAR(96)  NOT NULL,
  event_type    VARCHAR(32)  NOT NULL,
  order_no      VARCHAR(40)  NOT NULL,
  exchange_name VARCHAR(128) NOT NULL,
  routing_key   VARCHAR(128) NOT NULL,
  payload       MEDIUMTEXT   NOT NULL,
  delay_ms      BIGINT       NOT NULL DEFAULT 0,
  status        VARCHAR(16)  NOT NULL DEFAULT 'NEW',
  retry_count   INT          NOT NULL DEFAULT 0,
  next_retry_at DATETIME(3)  NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  lease_owner   VARCHAR(64)  NULL,
  last_error    VARCHAR(512) NULL,
  created_at    DATETIME(3)  NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  updated_at    DATETIME(3)  NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  PRIMARY KEY (id),
  UNIQUE KEY uk_outbox_event (event_id),
  KEY idx_outbox_status_next (status, next_retry_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE mq_consume_log (
  id            BIGINT      NOT NULL AUTO_INCREMENT,
  event_id      VARCHAR(96) NOT NULL,
  consumer_name VARCHAR(64) NOT NULL,
  created_at    DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  PRIMARY KEY (id),
  UNIQUE KEY uk_consume_event (event_id, consumer_name)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE payment (
  id         BIGINT      NOT NULL AUTO_INCREMENT,
  payment_no VARCHAR(64) NOT NULL,
  order_no   VARCHAR(40) NOT NULL,
  amount     BIGINT      NOT NULL,
  status     VARCHAR(16) NOT NULL,
  paid_at    DATETIME(3) NOT NULL,
  created_at DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  PRIMARY KEY (id),
  UNIQUE KEY uk_payment_no (payment_no),
  KEY idx_payment_order (order_no)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- +goose Down
DROP TABLE payment;
DROP TABLE mq_consume_log;
DROP TABLE mq_outbox;
DROP TABLE stock_flow;
DROP TABLE order_item;
DROP TABLE order_info;
DROP TABLE stock;
DROP TABLE product;
