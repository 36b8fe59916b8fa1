package mockllm

import (
	"net/http"
	"strings"
)

// endpoint is one API route.
type endpoint struct {
	method string
	build  func(body []byte, o buildOptions) (answer, *apiError)
}

var (
	epChat       = endpoint{http.MethodPost, buildChat}
	epEmbeddings = endpoint{http.MethodPost, buildEmbeddings}
	epModels     = endpoint{http.MethodGet, buildModels}
	epModel      = endpoint{http.MethodGet, nil} // built per path
	epMessages   = endpoint{http.MethodPost, buildMessages}
)

func route(path string) (endpoint, bool) {
	switch path {
	case "/v1/chat/completions":
		return epChat, true
	case "/v1/embeddings":
		return epEmbeddings, true
	case "/v1/models":
		return epModels, true
	case "/v1/messages":
		return epMessages, true
	}
	if id, ok := strings.CutPrefix(path, "/v1/models/"); ok && id != "" {
		ep := epModel
		ep.build = func([]byte, buildOptions) (answer, *apiError) { return buildModel(id) }
		return ep, true
	}
	return endpoint{}, false
}

// shapeOf is the error shape of a path: Anthropic's under /v1/messages.
func shapeOf(path string) shape {
	if path == "/v1/messages" || strings.HasPrefix(path, "/v1/messages/") {
		return shapeAnthropic
	}
	return shapeOpenAI
}
