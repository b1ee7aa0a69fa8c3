package client

import (
	"context"
	"net/url"
)

// DerivationSnapshot fetches the named derivation's snapshot as the server
// publishes it (GET /v1/derivations/{name}/snapshot, JSON). The caller
// checks it (rederive.Snapshot.Open): the server's word is not trusted.
func (c *Client) DerivationSnapshot(ctx context.Context, name string) ([]byte, error) {
	return c.get(ctx, "/v1/derivations/"+url.PathEscape(name)+"/snapshot", nil)
}
