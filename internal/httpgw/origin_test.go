package httpgw

import "testing"

// TestOriginsAsBrowsersSendThem: --cors takes scheme://host:port, as
// etcd's, but a browser sends its origin without the port when it is the
// scheme's default: https://ui.example for a page of https://ui.example:443.
// Such an origin is allowed by the listing with the port, and only by it.
func TestOriginsAsBrowsersSendThem(t *testing.T) {
	l := newAllowList([]string{"https://ui.example:443", "http://dev.example:80", "http://ui.example:8080", "https://[2001:db8::1]:443"})
	for origin, want := range map[string]bool{
		"https://ui.example":      true,
		"https://ui.example:443":  true,
		"http://dev.example":      true,
		"http://ui.example:8080":  true,
		"https://[2001:db8::1]":   true,
		"http://ui.example":       false, // another scheme's default port
		"https://ui.example:8443": false,
		"https://dev.example":     false,
		"https://evil.example":    false,
		"null":                    false,
		"https://ui.example/x":    false,
	} {
		if got := l.allowsOrigin(origin); got != want {
			t.Errorf("allowsOrigin(%q) = %v, want %v", origin, got, want)
		}
	}
	if !newAllowList([]string{"*"}).allowsOrigin("https://any.example") || !newAllowList(nil).allowsOrigin("null") {
		t.Error("an empty or * list allows every origin")
	}
}
