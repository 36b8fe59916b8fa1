package ui

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"path"

	"github.com/valyala/fasthttp"

	"github.com/llmgovernor/governor/internal/reply"
	"github.com/llmgovernor/governor/proxy"
)

// Path is where the page is served; its scripts and styles are under
// Path + "/".
const Path = proxy.APIPrefix + "ui"

//go:embed static
var static embed.FS

// securityHeaders keep the page to its own files: no script, style or
// connection from elsewhere, no framing by other sites.
var securityHeaders = [][2]string{
	{"Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
		"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"},
	{"X-Content-Type-Options", "nosniff"},
	{"Referrer-Policy", "no-referrer"},
	{"X-Frame-Options", "DENY"},
	// Revalidated on every load (cheap: an ETag), so an upgraded
	// Governor is never shown with an old script.
	{fasthttp.HeaderCacheControl, "no-cache"},
}

// contentTypes are the types of the embedded files, by extension; the
// system's MIME tables are not consulted, so every machine serves the same.
var contentTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
}

// file is one embedded file, ready to serve.
type file struct {
	body        []byte
	contentType string
	etag        string
}

// Register serves the page on p: Path, and its files under Path + "/";
// Path + "/" itself redirects to Path.
// It must be called before p serves.
func Register(p *proxy.Proxy) {
	files, err := load()
	if err != nil {
		panic(fmt.Sprintf("ui: embedded files: %v", err)) // a broken build, not an input
	}
	for name, f := range files {
		route := Path + "/" + name
		if name == "index.html" {
			route = Path
		}
		p.HandlePublic(route, f.serve)
	}
	p.HandlePublic(Path+"/", toPage)
}

// toPage sends Path + "/", as a user may type it, to the page, whose
// relative links hold only from Path. The Location is relative, so that it
// holds behind a proxy that adds a path prefix too.
func toPage(ctx *fasthttp.RequestCtx) {
	ctx.Response.Header.Set(fasthttp.HeaderLocation, "../"+path.Base(Path))
	ctx.SetStatusCode(fasthttp.StatusMovedPermanently)
}

// load reads the embedded files.
func load() (map[string]*file, error) {
	files := map[string]*file{}
	err := fs.WalkDir(static, "static", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		body, err := static.ReadFile(name)
		if err != nil {
			return err
		}
		ct, ok := contentTypes[path.Ext(name)]
		if !ok {
			return fmt.Errorf("%s: no content type for its extension", name)
		}
		sum := sha256.Sum256(body)
		files[path.Base(name)] = &file{
			body:        body,
			contentType: ct,
			etag:        `"` + hex.EncodeToString(sum[:8]) + `"`,
		}
		return nil
	})
	return files, err
}

func (f *file) serve(ctx *fasthttp.RequestCtx) {
	if !ctx.IsGet() && !ctx.IsHead() {
		ctx.Response.Header.Set(fasthttp.HeaderAllow, "GET, HEAD")
		reply.WriteError(ctx, false, reply.Error{Status: fasthttp.StatusMethodNotAllowed, Code: proxy.CodeMethodNotAllowed, Message: "use GET"})
		return
	}
	for _, h := range securityHeaders {
		ctx.Response.Header.Set(h[0], h[1])
	}
	ctx.Response.Header.Set(fasthttp.HeaderETag, f.etag)
	if string(ctx.Request.Header.Peek(fasthttp.HeaderIfNoneMatch)) == f.etag {
		ctx.SetStatusCode(fasthttp.StatusNotModified)
		return
	}
	ctx.SetContentType(f.contentType)
	ctx.SetBody(f.body)
}
