-- +goose Up
-- The support search by product and status (GET /api/admin/orders?productId=&status=)
-- walks (product_id, status, created_at) in key order: it reads only the rows
-- it returns. idx_product_status (product_id, status) is its prefix and is
-- replaced, so the writers maintain no more indexes than before; the readers
-- of (product_id, status) (CountOrders, the flow audit, the pulse) use the
-- prefix. Measured on 300,000 orders of 20 products: a status the product has
-- none of read all 15,000 of its rows through idx_product_created, 0 here.
-- Runs on MariaDB 10.11 and MySQL 8.
ALTER TABLE order_info
  ADD KEY idx_product_status_created (product_id, status, created_at),
  DROP INDEX idx_product_status;

-- +goose Down
ALTER TABLE order_info
  ADD KEY idx_product_status (product_id, status),
  DROP INDEX idx_product_status_created;
