package alert

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/auditd/auditd/internal/redact"
	"github.com/auditd/auditd/internal/redirect"
)

// Sink receives alert changes. The Manager calls Notify from one goroutine
// per sink, in the order of the changes, with one alert per call (a Sink
// must accept any number). Notify should retry what is worth retrying
// itself, give up when ctx ends, and return an error only once the alerts
// are not going to be delivered.
type Sink interface {
	Notify(ctx context.Context, alerts []Alert) error
	// Name names the sink in logs and metrics; it must be unique among a
	// Manager's sinks and low-cardinality.
	Name() string
}

// WebhookConfig configures a webhook sink.
type WebhookConfig struct {
	// Name of the sink, sent as the message's "receiver" (default
	// "webhook").
	Name string
	// URL receives the POSTs.
	URL string
	// Headers are added to every request (e.g. Authorization).
	Headers map[string]string
	// Timeout bounds one request (default 10s).
	Timeout time.Duration
	// MaxRetries is how many times a failed request is retried (default
	// 5; negative for none). Network errors, 5xx and 429 are retried;
	// other statuses are not.
	MaxRetries int
	// InitialBackoff is the wait before the first retry (default 500ms);
	// it doubles with each retry up to MaxBackoff (default 30s), with
	// jitter. A 429's Retry-After, in seconds, is honoured up to
	// MaxBackoff.
	InitialBackoff time.Duration
	MaxBackoff     time.Duration
	// ExternalURL is auditd's own base URL as its users reach it, sent as
	// "externalURL" (without a password, see redact.URL); an alert's
	// "generatorURL" is ExternalURL + "/v1/alerts/" + id.
	ExternalURL string
}

// Validate reports a configuration that can never deliver.
func (c WebhookConfig) Validate() error {
	// url.Parse's error quotes the URL: shown without its secrets.
	u, err := url.Parse(c.URL)
	if err != nil {
		return fmt.Errorf("alert: webhook %s: url: %w", c.Name, redact.Error(err, c.URL))
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("alert: webhook %s: url %q is not an absolute http(s) URL", c.Name, redact.URL(c.URL))
	}
	if c.ExternalURL != "" {
		if _, err := url.Parse(c.ExternalURL); err != nil {
			return fmt.Errorf("alert: webhook %s: external url: %w", c.Name, redact.Error(err, c.ExternalURL))
		}
	}
	return nil
}

// Webhook is a Sink that POSTs Alertmanager webhook messages (version 4),
// so that receivers written for Alertmanager's webhook_config work as they
// are. Each auditd alert becomes an Alertmanager alert whose labels are
// alertname ([Kind.AlertName]), kind, subject, id and the alert's Labels,
// and whose annotations are summary and, if at most 64 KiB, details (the
// JSON text). A call to Notify sends one message: its alerts form the
// group, groupLabels are the labels alertname, kind, subject and id that
// all its alerts share, and groupKey is "{}:" followed by groupLabels in
// Prometheus label-set notation, so that with the Manager's one alert per
// call each alert is its own group, as with Alertmanager's group_by ['...'].
type Webhook struct {
	cfg    WebhookConfig
	client *http.Client
}

var _ Sink = (*Webhook)(nil)

// NewWebhook returns a webhook sink. A bad URL (see Validate) makes every
// Notify fail.
func NewWebhook(cfg WebhookConfig) *Webhook {
	if cfg.Name == "" {
		cfg.Name = "webhook"
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.MaxRetries == 0 {
		cfg.MaxRetries = 5
	}
	if cfg.InitialBackoff <= 0 {
		cfg.InitialBackoff = 500 * time.Millisecond
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = 30 * time.Second
	}
	cfg.MaxBackoff = max(cfg.MaxBackoff, cfg.InitialBackoff)
	cfg.ExternalURL = strings.TrimSuffix(redact.URL(cfg.ExternalURL), "/") // a link, shown: no password
	return &Webhook{cfg: cfg, client: &http.Client{Timeout: cfg.Timeout, CheckRedirect: redirect.SameOrigin}}
}

// Name implements Sink.
func (w *Webhook) Name() string { return w.cfg.Name }

// Alertmanager's webhook message, version 4 (notify/webhook.Message and
// template.Data in github.com/prometheus/alertmanager).
type amMessage struct {
	Version           string            `json:"version"`
	GroupKey          string            `json:"groupKey"`
	TruncatedAlerts   uint64            `json:"truncatedAlerts"`
	Status            string            `json:"status"`
	Receiver          string            `json:"receiver"`
	GroupLabels       map[string]string `json:"groupLabels"`
	CommonLabels      map[string]string `json:"commonLabels"`
	CommonAnnotations map[string]string `json:"commonAnnotations"`
	ExternalURL       string            `json:"externalURL"`
	Alerts            []amAlert         `json:"alerts"`
}

type amAlert struct {
	Status       string            `json:"status"`
	Labels       map[string]string `json:"labels"`
	Annotations  map[string]string `json:"annotations"`
	StartsAt     time.Time         `json:"startsAt"`
	EndsAt       time.Time         `json:"endsAt"` // zero while firing
	GeneratorURL string            `json:"generatorURL"`
	Fingerprint  string            `json:"fingerprint"`
}

// maxDetailsAnnotation bounds the details annotation; larger details are
// left to GET /v1/alerts/{id}.
const maxDetailsAnnotation = 64 << 10

// groupBy are the labels a message may be grouped by.
var groupBy = []string{"alertname", "id", "kind", "subject"}

func (w *Webhook) message(alerts []Alert) amMessage {
	msg := amMessage{
		Version: "4", Status: string(StateResolved), Receiver: w.cfg.Name,
		GroupLabels: map[string]string{}, CommonLabels: map[string]string{}, CommonAnnotations: map[string]string{},
		ExternalURL: w.cfg.ExternalURL,
		Alerts:      make([]amAlert, 0, len(alerts)),
	}
	for i, a := range alerts {
		am := amAlert{
			Status:      string(a.State),
			Labels:      make(map[string]string, len(a.Labels)+4),
			Annotations: map[string]string{"summary": a.Summary},
			StartsAt:    a.StartsAt.UTC(),
		}
		for k, v := range a.Labels {
			am.Labels[k] = v
		}
		am.Labels["alertname"] = a.Kind.AlertName()
		am.Labels["kind"] = string(a.Kind)
		am.Labels["subject"] = a.Subject
		am.Labels["id"] = a.ID
		if len(a.Details) > 0 && len(a.Details) <= maxDetailsAnnotation {
			am.Annotations["details"] = string(a.Details)
		}
		if a.State == StateFiring {
			msg.Status = string(StateFiring)
		} else if a.EndsAt != nil {
			am.EndsAt = a.EndsAt.UTC()
		}
		if w.cfg.ExternalURL != "" {
			am.GeneratorURL = w.cfg.ExternalURL + "/v1/alerts/" + escapeID(a.ID)
		}
		am.Fingerprint = fingerprint(am.Labels)
		if i == 0 {
			for k, v := range am.Labels {
				msg.CommonLabels[k] = v
			}
			for k, v := range am.Annotations {
				msg.CommonAnnotations[k] = v
			}
		} else {
			intersect(msg.CommonLabels, am.Labels)
			intersect(msg.CommonAnnotations, am.Annotations)
		}
		msg.Alerts = append(msg.Alerts, am)
	}
	for _, k := range groupBy {
		if v, ok := msg.CommonLabels[k]; ok {
			msg.GroupLabels[k] = v
		}
	}
	msg.GroupKey = "{}:" + labelSetString(msg.GroupLabels)
	return msg
}

// intersect deletes from common what other lacks or holds differently.
func intersect(common, other map[string]string) {
	for k, v := range common {
		if w, ok := other[k]; !ok || w != v {
			delete(common, k)
		}
	}
}

// escapeID escapes each path element of an alert id.
func escapeID(id string) string {
	parts := strings.Split(id, "/")
	for i, p := range parts {
		parts[i] = url.PathEscape(p)
	}
	return strings.Join(parts, "/")
}

// labelSetString renders labels as Prometheus does (model.LabelSet.String):
// {a="x", b="y"}, names sorted, values Go-quoted.
func labelSetString(labels map[string]string) string {
	names := sortedKeys(labels)
	var b strings.Builder
	b.WriteByte('{')
	for i, n := range names {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(n)
		b.WriteByte('=')
		b.WriteString(strconv.Quote(labels[n]))
	}
	b.WriteByte('}')
	return b.String()
}

// fingerprint is Prometheus' label-set fingerprint as Alertmanager shows it
// (model.LabelSet.Fingerprint().String()): 64-bit FNV-1a over the sorted
// names and values, each followed by the byte 0xff, in 16 hex digits.
func fingerprint(labels map[string]string) string {
	const (
		offset64 = 14695981039346656037
		prime64  = 1099511628211
		sep      = 0xff
	)
	h := uint64(offset64)
	add := func(s string) {
		for i := 0; i < len(s); i++ {
			h ^= uint64(s[i])
			h *= prime64
		}
		h ^= sep
		h *= prime64
	}
	for _, n := range sortedKeys(labels) {
		add(n)
		add(labels[n])
	}
	return fmt.Sprintf("%016x", h)
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// statusError is a response other than 2xx.
type statusError struct {
	code       int
	body       string
	retryAfter time.Duration
}

func (e *statusError) Error() string {
	return fmt.Sprintf("status %d: %q", e.code, e.body)
}

func (e *statusError) retryable() bool {
	return e.code >= 500 || e.code == http.StatusTooManyRequests
}

// Notify implements Sink: it POSTs one message holding alerts, retrying
// network errors, 5xx and 429 with exponential backoff and jitter.
func (w *Webhook) Notify(ctx context.Context, alerts []Alert) error {
	if len(alerts) == 0 {
		return nil
	}
	if err := w.cfg.Validate(); err != nil {
		return err
	}
	body, err := json.Marshal(w.message(alerts))
	if err != nil {
		return fmt.Errorf("alert: webhook %s: encode: %w", w.cfg.Name, err)
	}
	backoff := w.cfg.InitialBackoff
	for attempt := 0; ; attempt++ {
		err := w.post(ctx, body)
		if err == nil {
			return nil
		}
		var se *statusError
		isStatus := errors.As(err, &se)
		if (isStatus && !se.retryable()) || ctx.Err() != nil || attempt >= w.cfg.MaxRetries ||
			errors.Is(err, redirect.ErrCrossOrigin) { // a retry meets the same redirect
			return fmt.Errorf("alert: webhook %s: giving up after %d attempts: %w", w.cfg.Name, attempt+1, err)
		}
		// Equal jitter: half the backoff, plus up to the other half.
		wait := backoff/2 + rand.N(backoff/2+1)
		if isStatus && se.retryAfter > wait {
			wait = min(se.retryAfter, w.cfg.MaxBackoff)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("alert: webhook %s: giving up after %d attempts: %w (last error: %v)", w.cfg.Name, attempt+1, ctx.Err(), err)
		case <-t.C:
		}
		backoff = min(2*backoff, w.cfg.MaxBackoff)
	}
}

func (w *Webhook) post(ctx context.Context, body []byte) error {
	ctx, cancel := context.WithTimeout(ctx, w.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.cfg.URL, bytes.NewReader(body))
	if err != nil {
		return redact.Error(err, w.cfg.URL)
	}
	for k, v := range w.cfg.Headers {
		req.Header.Set(k, v)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "auditd")
	res, err := w.client.Do(req)
	if err != nil {
		// net/http hides the password, not a token in the query or the
		// user name.
		return redact.Error(err, w.cfg.URL)
	}
	defer res.Body.Close()
	snippet, _ := io.ReadAll(io.LimitReader(res.Body, 512))
	_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10)) // lets the connection be reused
	if res.StatusCode/100 == 2 {
		return nil
	}
	se := &statusError{code: res.StatusCode, body: string(snippet)}
	if s, err := strconv.Atoi(res.Header.Get("Retry-After")); err == nil && s > 0 {
		se.retryAfter = time.Duration(s) * time.Second
	}
	return se
}
