package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/valyala/fasthttp"
)

// poster is the load generator's HTTP client: it POSTs a body to a
// target and reads the answer. Every target in a run gets the same kind.
type poster interface {
	// post sends body and leaves the response body in resp; an answer
	// other than 200 OK is an error.
	post(ctx context.Context, body []byte, resp *bytes.Buffer) error
	close()
}

// newPoster returns a client of the given kind (-client) for url, with
// connections enough for conns concurrent requests.
func newPoster(kind, url, contentType string, conns int) poster {
	if kind == "fasthttp" {
		return &fastPoster{url: url, contentType: contentType, client: &fasthttp.Client{
			MaxConnsPerHost:     conns,
			MaxIdleConnDuration: time.Minute,
			MaxConnWaitTimeout:  time.Minute,
		}}
	}
	tr := &http.Transport{MaxIdleConns: conns, MaxIdleConnsPerHost: conns, IdleConnTimeout: time.Minute, DisableCompression: true}
	return &netPoster{url: url, contentType: contentType, tr: tr, client: &http.Client{Transport: tr, Timeout: time.Minute}}
}

// netPoster is net/http's client: what most Go programs use, and about
// as costly per request as the servers measured.
type netPoster struct {
	url, contentType string
	tr               *http.Transport
	client           *http.Client
}

func (p *netPoster) post(ctx context.Context, body []byte, resp *bytes.Buffer) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", p.contentType)
	r, err := p.client.Do(req)
	if err != nil {
		return err
	}
	defer r.Body.Close()
	resp.Reset()
	if _, err := resp.ReadFrom(r.Body); err != nil {
		return err
	}
	if r.StatusCode != http.StatusOK {
		return fmt.Errorf("POST %s: %s: %.300s", p.url, r.Status, resp.Bytes())
	}
	return nil
}

func (p *netPoster) close() { p.tr.CloseIdleConnections() }

// fastPoster is valyala/fasthttp's client: it takes its request and
// response objects from pools and parses less, so on a machine the generator shares
// with the server it takes fewer of the cores the servers compete for.
// It does not watch ctx: a request in flight when a round ends finishes
// (or times out) on its own.
type fastPoster struct {
	url, contentType string
	client           *fasthttp.Client
}

func (p *fastPoster) post(_ context.Context, body []byte, resp *bytes.Buffer) error {
	req, r := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(r)
	req.SetRequestURI(p.url)
	req.Header.SetMethod(fasthttp.MethodPost)
	req.Header.SetContentType(p.contentType)
	req.SetBody(body)
	if err := p.client.DoTimeout(req, r, time.Minute); err != nil {
		return err
	}
	resp.Reset()
	resp.Write(r.Body())
	if r.StatusCode() != fasthttp.StatusOK {
		return fmt.Errorf("POST %s: %d: %.300s", p.url, r.StatusCode(), resp.Bytes())
	}
	return nil
}

func (p *fastPoster) close() { p.client.CloseIdleConnections() }
