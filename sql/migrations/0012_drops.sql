-- +goose Up
-- Fair drops (issue 28): a product's waiting-room terms and the secret seed
-- of its verifiable shuffle. The seed is drawn once, when the room is first
-- turned on, and never changes: its commitment (hex SHA-256) is published at
-- once, the seed itself only at the opening's shuffle (Redis holds it from
-- then on). Redis holds the terms the scripts apply; this row is their
-- durable record. Runs on MariaDB 10.11 and MySQL 8.
CREATE TABLE product_drop (
  product_id   BIGINT      NOT NULL,
  seed         CHAR(64)    NOT NULL,
  commitment   CHAR(64)    NOT NULL,
  room_on      TINYINT(1)  NOT NULL DEFAULT 0,
  mode         VARCHAR(8)  NOT NULL DEFAULT 'fifo',
  pre_queue_ms BIGINT      NOT NULL DEFAULT 0,
  reserve_n    BIGINT      NOT NULL DEFAULT 0,
  pow_cost     BIGINT      NOT NULL DEFAULT 0,
  ceiling      BIGINT      NOT NULL DEFAULT 0,
  window_ms    BIGINT      NOT NULL DEFAULT 120000,
  created_at   DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  updated_at   DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3) ON UPDATE CURRENT_TIMESTAMP(3),
  PRIMARY KEY (product_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- +goose Down
DROP TABLE product_drop;
