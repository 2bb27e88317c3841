package persistence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// Product is a row of product. Money is in minor units.
type Product struct {
	ID           int64
	Name         string
	ImageURL     string // absolute http(s) URL of the product's picture; "" = none
	Description  string // plain text shown on the storefront; "" = none
	Price        int64
	Total        int64 // units the sale started with
	PerUserLimit int64 // units one user may hold; 0 = no limit
	MaxPerOrder  int64 // largest quantity of one order
	Shards       int   // Redis stock shards (>= 1)
	SaleStart    time.Time
	SaleEnd      time.Time
	CreatedAt    time.Time
}

// Stock is a row of stock: available + locked + sold = total + Σ ADJUST.
type Stock struct {
	ProductID int64
	Available int64
	Locked    int64
	Sold      int64
	Version   int64
}

// CreateProduct inserts p and its stock row (available = p.Total) and returns
// p with ID and CreatedAt set.
func (s *Store) CreateProduct(ctx context.Context, p Product) (Product, error) {
	if p.Shards < 1 {
		p.Shards = 1
	}
	err := s.WithTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `INSERT INTO product
			(name, image_url, description, price, total, per_user_limit, max_per_order, shards, sale_start, sale_end)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			p.Name, p.ImageURL, p.Description, p.Price, p.Total, p.PerUserLimit, p.MaxPerOrder, p.Shards, p.SaleStart.UTC(), p.SaleEnd.UTC())
		if err != nil {
			return fmt.Errorf("insert product: %w", err)
		}
		if p.ID, err = res.LastInsertId(); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO stock (product_id, available) VALUES (?, ?)`, p.ID, p.Total); err != nil {
			return fmt.Errorf("insert stock: %w", err)
		}
		return tx.QueryRowContext(ctx, `SELECT created_at FROM product WHERE id = ?`, p.ID).Scan(&p.CreatedAt)
	})
	if err != nil {
		return Product{}, fmt.Errorf("persistence: create product: %w", err)
	}
	return p, nil
}

const productCols = `id, name, image_url, description, price, total, per_user_limit, max_per_order, shards, sale_start, sale_end, created_at`

func scanProduct(sc interface{ Scan(...any) error }) (Product, error) {
	var p Product
	err := sc.Scan(&p.ID, &p.Name, &p.ImageURL, &p.Description, &p.Price, &p.Total, &p.PerUserLimit, &p.MaxPerOrder, &p.Shards, &p.SaleStart, &p.SaleEnd, &p.CreatedAt)
	return p, err
}

// GetProduct returns the product or ErrNotFound.
func (s *Store) GetProduct(ctx context.Context, id int64) (Product, error) {
	p, err := scanProduct(s.DB.QueryRowContext(ctx, `SELECT `+productCols+` FROM product WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return Product{}, ErrNotFound
	}
	if err != nil {
		return Product{}, fmt.Errorf("persistence: get product %d: %w", id, err)
	}
	return p, nil
}

// ListProducts returns every product, oldest first.
func (s *Store) ListProducts(ctx context.Context) ([]Product, error) {
	rows, err := s.DB.QueryContext(ctx, `SELECT `+productCols+` FROM product ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("persistence: list products: %w", err)
	}
	defer rows.Close()
	var out []Product
	for rows.Next() {
		p, err := scanProduct(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, rows.Err()
}

// GetStock returns the product's stock row or ErrNotFound.
func (s *Store) GetStock(ctx context.Context, productID int64) (Stock, error) {
	st := Stock{ProductID: productID}
	err := s.DB.QueryRowContext(ctx, `SELECT available, locked, sold, version FROM stock WHERE product_id = ?`, productID).
		Scan(&st.Available, &st.Locked, &st.Sold, &st.Version)
	if errors.Is(err, sql.ErrNoRows) {
		return Stock{}, ErrNotFound
	}
	if err != nil {
		return Stock{}, fmt.Errorf("persistence: get stock %d: %w", productID, err)
	}
	return st, nil
}
