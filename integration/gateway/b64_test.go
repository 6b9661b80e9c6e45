package gateway_test

import stdb64 "encoding/base64"

func base64(s string) string { return stdb64.StdEncoding.EncodeToString([]byte(s)) }
