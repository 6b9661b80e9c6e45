package lossfile

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWriteThenReadReturnsTheSameRecords(t *testing.T) {
	path := filepath.Join(t.TempDir(), "loss.jsonl")
	recs := []Record{
		NewRecord(22, OpPut, []byte("a"), []byte("1")),
		NewRecord(23, OpPut, []byte{0xff, 0}, []byte("bin")),
		NewRecord(24, OpDelete, []byte("a"), nil),
	}
	if err := Write(path, Header{AppliedRev: 24, ForkRev: 21}, recs); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h, got, err := Read(f)
	if err != nil {
		t.Fatal(err)
	}
	if h.Format != Format || h.AppliedRev != 24 || h.ForkRev != 21 || len(got) != 3 {
		t.Fatalf("header %+v, %d records", h, len(got))
	}
	if got[0].KeyText != "a" || got[1].KeyText != "" || !bytes.Equal(got[1].Key, []byte{0xff, 0}) {
		t.Fatalf("records %+v", got)
	}
	if l := Latest(got); len(l) != 2 || l[0].Rev != 23 || l[1].Rev != 24 || l[1].Op != OpDelete {
		t.Fatalf("latest %+v", l)
	}
}

func TestReadRefusesANewerFormat(t *testing.T) {
	_, _, err := Read(strings.NewReader(`{"zketcd_loss_format":2}` + "\n"))
	if err == nil || !strings.Contains(err.Error(), "format 2 is newer") {
		t.Fatalf("err %v", err)
	}
	if _, _, err := Read(strings.NewReader(`{"rev":1}` + "\n")); err == nil {
		t.Fatal("a file without a header was accepted")
	}
}
