-- +goose Up
-- Issue 14, support and refunds. Runs on MariaDB 10.11 and MySQL 8.0.19+.
--
-- payment: a REFUND_PENDING payment (money taken for an order that was not
-- payable any more) is refunded by an operator with a refundNo
-- (POST /api/admin/payments/{paymentNo}/refund): status REFUNDED, refund_no
-- and refunded_at set in one conditional update. refund_no is UNIQUE: one
-- refundNo refunds one payment at most, and replaying it is a no-op. The
-- CHECKs enumerate the statuses (persistence.Payment*) and tie refund_no to
-- REFUNDED.
ALTER TABLE payment
  ADD COLUMN refund_no   VARCHAR(64) NULL AFTER status,
  ADD COLUMN refunded_at DATETIME(3) NULL AFTER refund_no,
  ADD UNIQUE KEY uk_payment_refund (refund_no),
  -- the refund queue: REFUND_PENDING oldest first (keyset on created_at, id)
  ADD KEY idx_payment_status_created (status, created_at),
  ADD CONSTRAINT chk_payment_status CHECK (status IN ('PAID', 'REFUND_PENDING', 'REFUNDED')),
  ADD CONSTRAINT chk_payment_refund CHECK ((status = 'REFUNDED') = (refund_no IS NOT NULL AND refunded_at IS NOT NULL));

-- order_info: the support search (GET /api/admin/orders) pages newest first
-- on (created_at, id). By user it walks idx_user_created; by product (with
-- or without a status) idx_product_created; with neither (a status, a time
-- range or nothing) idx_created. InnoDB appends the primary key id to every
-- secondary index, so each one is ordered by (…, created_at, id).
ALTER TABLE order_info
  ADD KEY idx_product_created (product_id, created_at),
  ADD KEY idx_created (created_at);

-- mq_outbox: an order's status history (GET /api/admin/orders/{orderNo})
-- reads its own events by order_no, and the status batches that carry it
-- (ORDER_STATUS_BATCH rows are filed under their first order) by type and
-- time.
ALTER TABLE mq_outbox
  ADD KEY idx_outbox_order (order_no),
  ADD KEY idx_outbox_type_created (event_type, created_at);

-- +goose Down
ALTER TABLE mq_outbox
  DROP INDEX idx_outbox_type_created,
  DROP INDEX idx_outbox_order;
ALTER TABLE order_info
  DROP INDEX idx_created,
  DROP INDEX idx_product_created;
ALTER TABLE payment
  DROP CONSTRAINT chk_payment_refund,
  DROP CONSTRAINT chk_payment_status,
  DROP INDEX idx_payment_status_created,
  DROP INDEX uk_payment_refund,
  DROP COLUMN refunded_at,
  DROP COLUMN refund_no;
