package main

// authSummary says in the startup log which token guards what.
func authSummary(cfg Config) string {
	switch {
	case cfg.WriteToken != "" && cfg.ReadToken != "":
		return "writes need the write token; reads need the read or write token"
	case cfg.WriteToken != "":
		return "writes need the write token; reads are public"
	case cfg.ReadToken != "":
		return "reads and writes need the read token (no write token set)"
	}
	return "no tokens: reads and writes are open"
}
