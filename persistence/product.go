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
	ID          int64
	Name        string
	ImageURL    string // absolute http(s) URL of the product's picture; "" = none
	Description string // plain text shown on the storefront; "" = none
	Price       int64
	Total       int64 // units the sale started with
	// Adjusted is Σ ADJUST flows of the product (read, never written):
	// Total + Adjusted is the product's units after stock repairs, what
	// stock's available + locked + sold adds up to (docs/spec.md §5.3).
	Adjusted     int64
	PerUserLimit int64 // units one user may hold; 0 = no limit
	MaxPerOrder  int64 // largest quantity of one order
	Shards       int   // Redis stock shards (>= 1)
	SaleStart    time.Time
	SaleEnd      time.Time // OpenEnd: open until sold out
	Paused       bool      // an admin paused the sale (reserve.lua refuses)
	// SaleVersion counts the admin changes of the sale's terms (ChangeProduct);
	// Redis keeps the terms of the highest version (lua.SaleTerms).
	SaleVersion int64
	// Incarnation tells this product from any earlier one with the same id
	// (another database's, or one a MySQL restore forgot): 32 random hex
	// digits set by CreateProductBy, "" for a product created before
	// migration 0011. Every stock hash of the product carries it (load.lua).
	Incarnation string
	CreatedAt   time.Time
}

// OpenEnd is the sale_end of a sale open until sold out: the last second
// DATETIME holds, so every comparison with sale_end (reserve.lua's window,
// the pacer, the pulse) keeps working. The API shows it as saleEnd null.
var OpenEnd = time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)

// OpenEnded reports whether the sale has no end but its stock (OpenEnd).
func (p Product) OpenEnded() bool { return !p.SaleEnd.Before(OpenEnd) }

// Units is the product's units after stock repairs: Total + Adjusted.
func (p Product) Units() int64 { return p.Total + p.Adjusted }

// Stock is a row of stock: available + locked + sold = total + Σ ADJUST.
type Stock struct {
	ProductID int64 `json:"productId"`
	Available int64 `json:"available"`
	Locked    int64 `json:"locked"`
	Sold      int64 `json:"sold"`
	Version   int64 `json:"version"`
}

// CreateProduct inserts p and its stock row (available = p.Total) and returns
// p with ID and CreatedAt set.
func (s *Store) CreateProduct(ctx context.Context, p Product) (Product, error) {
	return s.CreateProductBy(ctx, 0, p)
}

// CreateProductBy is CreateProduct by admin adminID: with adminID > 0 the
// same transaction writes the admin_audit entry "create" with the product's
// terms.
func (s *Store) CreateProductBy(ctx context.Context, adminID int64, p Product) (Product, error) {
	return s.CreateProductChecked(ctx, adminID, p, nil)
}

// CreateProductChecked is CreateProductBy with check run inside the
// transaction once the product has its id and incarnation (p.Incarnation,
// when empty, is set to a new random one): an error from check rolls the
// creation back and is returned as it is (wrapped), so nothing is stored.
// The gateway checks there that Redis holds no stock of an earlier product
// with the same id.
func (s *Store) CreateProductChecked(ctx context.Context, adminID int64, p Product, check func(ctx context.Context, p Product) error) (Product, error) {
	if p.Shards < 1 {
		p.Shards = 1
	}
	if p.Incarnation == "" {
		p.Incarnation = newIncarnation()
	}
	err := s.WithTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `INSERT INTO product
			(name, image_url, description, price, total, per_user_limit, max_per_order, shards, incarnation, sale_start, sale_end, paused)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			p.Name, p.ImageURL, p.Description, p.Price, p.Total, p.PerUserLimit, p.MaxPerOrder, p.Shards, p.Incarnation,
			p.SaleStart.UTC(), p.SaleEnd.UTC(), p.Paused)
		if err != nil {
			return fmt.Errorf("insert product: %w", err)
		}
		if p.ID, err = res.LastInsertId(); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO stock (product_id, available) VALUES (?, ?)`, p.ID, p.Total); err != nil {
			return fmt.Errorf("insert stock: %w", err)
		}
		if adminID > 0 {
			if err := insertAudit(ctx, tx, adminID, ActionCreate, p.ID, p.terms()); err != nil {
				return err
			}
		}
		if check != nil {
			if err := check(ctx, p); err != nil {
				return err
			}
		}
		return tx.QueryRowContext(ctx, `SELECT created_at FROM product WHERE id = ?`, p.ID).Scan(&p.CreatedAt)
	})
	if err != nil {
		return Product{}, fmt.Errorf("persistence: create product: %w", err)
	}
	return p, nil
}

// productCols are the columns scanProduct reads (from product, aliased p):
// the row and Σ ADJUST of the product (index idx_flow_product).
const productCols = `p.id, p.name, p.image_url, p.description, p.price, p.total, p.per_user_limit, p.max_per_order, p.shards,
	p.incarnation, p.sale_start, p.sale_end, p.paused, p.sale_version, p.created_at,
	(SELECT COALESCE(SUM(f.quantity), 0) FROM stock_flow f WHERE f.product_id = p.id AND f.biz_type = 'ADJUST')`

func scanProduct(sc interface{ Scan(...any) error }) (Product, error) {
	var p Product
	err := sc.Scan(&p.ID, &p.Name, &p.ImageURL, &p.Description, &p.Price, &p.Total, &p.PerUserLimit, &p.MaxPerOrder, &p.Shards,
		&p.Incarnation, &p.SaleStart, &p.SaleEnd, &p.Paused, &p.SaleVersion, &p.CreatedAt, &p.Adjusted)
	return p, err
}

// GetProduct returns the product or ErrNotFound.
func (s *Store) GetProduct(ctx context.Context, id int64) (Product, error) {
	p, err := scanProduct(s.DB.QueryRowContext(ctx, `SELECT `+productCols+` FROM product p WHERE p.id = ?`, id))
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
	return s.queryProducts(ctx, `SELECT `+productCols+` FROM product p ORDER BY p.id`)
}

// queryProducts runs query, which selects productCols, and scans every row.
func (s *Store) queryProducts(ctx context.Context, query string, args ...any) ([]Product, error) {
	rows, err := s.DB.QueryContext(ctx, query, args...)
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
