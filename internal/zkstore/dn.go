package zkstore

import (
	"encoding/asn1"
	"encoding/hex"
	"errors"
	"strings"

	"golang.org/x/crypto/cryptobyte"
	cbasn1 "golang.org/x/crypto/cryptobyte/asn1"
)

// rfc2253Keywords are the attribute keywords Java's X500Principal.getName()
// prints in RFC 2253 form; any other attribute is printed as its dotted OID
// with the value's DER in hex.
var rfc2253Keywords = map[string]string{
	"2.5.4.3":                    "CN",
	"2.5.4.6":                    "C",
	"2.5.4.7":                    "L",
	"2.5.4.8":                    "ST",
	"2.5.4.9":                    "STREET",
	"2.5.4.10":                   "O",
	"2.5.4.11":                   "OU",
	"0.9.2342.19200300.100.1.25": "DC",
	"0.9.2342.19200300.100.1.1":  "UID",
}

// javaRFC2253 prints a certificate's raw subject as ZooKeeper's
// X509AuthenticationProvider names it: Java's
// X500Principal.getName() (RFC 2253: the RDNs last first, joined by ",";
// the attributes of one RDN in encoded order joined by "+"; string values
// with ,=+<>#;"\ and leading or trailing blanks escaped by a backslash;
// other attributes as OID=#hex of the value's DER). Go's pkix.Name.String
// differs from it in keywords and escaping, and the ACL id must be exact.
func javaRFC2253(raw []byte) (string, error) {
	in := cryptobyte.String(raw)
	var seq cryptobyte.String
	if !in.ReadASN1(&seq, cbasn1.SEQUENCE) || !in.Empty() {
		return "", errors.New("malformed name")
	}
	var rdns []string
	for !seq.Empty() {
		var set cryptobyte.String
		if !seq.ReadASN1(&set, cbasn1.SET) {
			return "", errors.New("malformed relative distinguished name")
		}
		var avas []string
		for !set.Empty() {
			var atv cryptobyte.String
			var oid asn1.ObjectIdentifier
			var value cryptobyte.String
			var tag cbasn1.Tag
			if !set.ReadASN1(&atv, cbasn1.SEQUENCE) || !atv.ReadASN1ObjectIdentifier(&oid) {
				return "", errors.New("malformed attribute")
			}
			full := atv
			if !atv.ReadAnyASN1(&value, &tag) || !atv.Empty() {
				return "", errors.New("malformed attribute value")
			}
			avas = append(avas, javaAVA(oid.String(), tag, []byte(value), []byte(full)))
		}
		rdns = append(rdns, strings.Join(avas, "+"))
	}
	for i, j := 0, len(rdns)-1; i < j; i, j = i+1, j-1 {
		rdns[i], rdns[j] = rdns[j], rdns[i]
	}
	return strings.Join(rdns, ","), nil
}

// javaAVA prints one attribute as Java's AVA.toRFC2253String does.
func javaAVA(oid string, tag cbasn1.Tag, value, der []byte) string {
	keyword, known := rfc2253Keywords[oid]
	if !known || !javaDERString(tag) {
		if !known {
			keyword = oid
		}
		return keyword + "=#" + hex.EncodeToString(der)
	}
	const escapees = ",=+<>#;\"\\"
	var b strings.Builder
	for _, c := range string(value) {
		switch {
		case strings.ContainsRune(escapees, c):
			b.WriteByte('\\')
			b.WriteRune(c)
		case c == 0:
			b.WriteString("\\00")
		default:
			b.WriteRune(c)
		}
	}
	s := []rune(b.String())
	lead := 0
	for lead < len(s) && (s[lead] == ' ' || s[lead] == '\r') {
		lead++
	}
	trail := len(s) - 1
	for trail >= 0 && (s[trail] == ' ' || s[trail] == '\r') {
		trail--
	}
	var out strings.Builder
	out.WriteString(keyword)
	out.WriteByte('=')
	for i, c := range s {
		if i < lead || i > trail {
			out.WriteByte('\\')
		}
		out.WriteRune(c)
	}
	return out.String()
}

// javaDERString reports the value tags Java prints as text (the others as
// hex): PrintableString, T61String, IA5String, GeneralString, UTF8String
// and BMPString.
func javaDERString(tag cbasn1.Tag) bool {
	switch tag {
	case cbasn1.PrintableString, cbasn1.T61String, cbasn1.IA5String, cbasn1.GeneralString, cbasn1.UTF8String, cbasn1.Tag(30):
		return true
	}
	return false
}
