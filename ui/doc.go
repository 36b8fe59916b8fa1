// Package ui serves Governor's live page, GET /governor/ui, on the main
// listener: every lane with its limit, target, calls in flight (and those
// of them held for the provider's budget) and waiting, latency, 429s,
// pauses and collapses, with charts of the last minutes, and every batch,
// async job or sync batch under way, with its progress, rate and ETA,
// whether a job is stalled (its batch directory full) and why, and for a
// job a cancel button.
//
// The page is static HTML, CSS and JavaScript embedded in the binary; it
// loads nothing from elsewhere and holds no data of its own. Its script
// polls Governor's JSON API (GET /governor/lanes, GET
// /governor/batches?sync=true) every second, cancels a job with POST
// /governor/batches/{id}/cancel and removes a finished one with DELETE
// /governor/batches/{id}, all with relative URLs, so the page also works
// behind a reverse proxy that adds a path prefix. The charts show what
// the page has seen since it was opened, up to five minutes.
//
// The page's files are served without the API token, because a browser
// cannot send a header when it opens a page; they contain nothing to guard.
// When Governor requires a token, the page asks for it once, keeps it in
// the tab's sessionStorage and sends it as X-Governor-Token with its calls.
package ui
