package gateway

import (
	"embed"
	"io/fs"
	"net/http"
)

// static holds the dashboard: plain HTML, JavaScript and CSS, embedded in
// the binary, no build step.
//
//go:embed static
var static embed.FS

var assets = func() http.Handler {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	return http.StripPrefix("/static/", http.FileServerFS(sub))
}()

// dashboard is GET /: the page, which polls /healthz, /v1/agents and
// /v1/stats once a second — with auth on, sending the bearer token it was
// opened with (/#token=<token>).
func (g *Gateway) dashboard(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-cache")
	http.ServeFileFS(w, r, static, "static/index.html")
}

func (g *Gateway) assets(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-cache")
	assets.ServeHTTP(w, r)
}
