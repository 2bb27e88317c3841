package gateway

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"

	"github.com/valyala/fasthttp"
)

// newStaticHandler serves the built client in dir. A request for a path
// that matches no file and has no extension in its last segment (a client
// route such as /orders/123) gets index.html; other misses go to notFound.
func newStaticHandler(dir string, notFound fasthttp.RequestHandler) (fasthttp.RequestHandler, error) {
	root, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("invalid config: StaticDir: %w", err)
	}
	if st, err := os.Stat(filepath.Join(root, "index.html")); err != nil || st.IsDir() {
		return nil, fmt.Errorf("invalid config: StaticDir %s has no index.html", root)
	}
	var serve fasthttp.RequestHandler
	fs := &fasthttp.FS{
		Root:            root,
		IndexNames:      []string{"index.html"},
		AcceptByteRange: true,
		// No file handle cache: it would need a cleanup goroutine that
		// nothing could stop, as Handler has no lifecycle.
		SkipCache: true,
		PathNotFound: func(ctx *fasthttp.RequestCtx) {
			path := ctx.Path()
			last := path[bytes.LastIndexByte(path, '/')+1:]
			if len(path) > 1 && bytes.IndexByte(last, '.') < 0 {
				ctx.Request.URI().SetPath("/")
				serve(ctx)
				return
			}
			notFound(ctx)
		},
	}
	serve = fs.NewRequestHandler()
	return serve, nil
}
