package broker

import (
	"embed"
	"io/fs"
	"net/http"
)

// uiFiles is the dashboard: plain HTML, CSS and JavaScript modules, written
// by hand and embedded, so the binary serves it with no build step and no
// network. Its data calls are the /v1 endpoints, with the key the user
// typed (docs/operations.md, "Dashboard").
//
//go:embed ui
var uiFiles embed.FS

// uiCSP keeps the dashboard to its own files: no inline script or style,
// no other origin, no framing (clickjacking), no forms posted anywhere.
const uiCSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// mountUI serves the dashboard at /ui/. Its files need no key: they hold no
// data, and every data call they make carries the user's key.
func (s *Server) mountUI(mux *http.ServeMux) {
	sub, err := fs.Sub(uiFiles, "ui")
	if err != nil {
		panic(err) // the embedded tree always has ui/
	}
	files := http.StripPrefix("/ui/", http.FileServerFS(sub))
	mux.Handle("GET /ui/", uiHeaders(files))
	mux.Handle("GET /ui", uiHeaders(http.RedirectHandler("/ui/", http.StatusMovedPermanently)))
}

// uiHeaders sets the dashboard's security headers.
func uiHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", uiCSP)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		// The files change with the binary only, but they carry no
		// modification time: revalidate rather than keep a stale app.
		h.Set("Cache-Control", "no-cache")
		next.ServeHTTP(w, r)
	})
}
