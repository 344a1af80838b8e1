# Sourced by hack/control-plane.sh and hack/real-node.sh: the client certificates they issue.
# shellcheck shell=bash

# client_cert BASE CA CA_KEY SUBJECT DAYS
# An ECDSA P-256 key BASE.key (its CSR BASE.csr) and a certificate BASE.crt for TLS client
# authentication (client.ext beside BASE holds its extensions), signed by CA / CA_KEY, valid DAYS
# days. The API server reads the user from SUBJECT's CN and the groups from its O.
client_cert() {
	local base="$1" ca="$2" ca_key="$3" subject="$4" days="$5"
	local ext="${base%/*}/client.ext"
	openssl req -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 \
		-keyout "$base.key" -out "$base.csr" -subj "$subject" 2>/dev/null
	printf '%s\n' "basicConstraints=CA:FALSE" "keyUsage=critical,digitalSignature" \
		"extendedKeyUsage=clientAuth" >"$ext"
	openssl x509 -req -in "$base.csr" -CA "$ca" -CAkey "$ca_key" \
		-CAcreateserial -out "$base.crt" -days "$days" -extfile "$ext" 2>/dev/null
}
