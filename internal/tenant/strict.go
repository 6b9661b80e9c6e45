package tenant

import (
	"bytes"
	"encoding/json"
	"errors"
)

// strictUnmarshal decodes data into v, refusing unknown fields and
// trailing data.
func strictUnmarshal(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("data after the JSON value")
	}
	return nil
}
