# Sourced by hack/control-plane.sh and hack/real-node.sh: the one kubeconfig writer they share.
# shellcheck shell=bash

# write_kubeconfig PATH SERVER CA USER NAMESPACE KEY=VALUE...
# A kubeconfig (mode 0600: it holds a credential) with one cluster, one user and one context,
# all for SERVER with the CA file CA. The user's credentials are the KEY=VALUE pairs: `token=T`,
# or `client-certificate=FILE client-key=FILE`. NAMESPACE: the context's default; empty for none.
write_kubeconfig() {
	local path="$1" server="$2" ca="$3" user="$4" namespace="$5"
	shift 5
	(
		# In a subshell: only the kubeconfig is private, not what the caller writes after it.
		umask 077
		{
			printf '%s\n' "apiVersion: v1" "kind: Config" "clusters:" "- name: walras-dev" \
				"  cluster:" "    server: $server" "    certificate-authority: $ca" \
				"users:" "- name: $user" "  user:"
			local pair
			for pair in "$@"; do
				printf '    %s: %s\n' "${pair%%=*}" "${pair#*=}"
			done
			printf '%s\n' "contexts:" "- name: walras-dev" "  context:" "    cluster: walras-dev" \
				"    user: $user"
			[[ -z "$namespace" ]] || printf '    namespace: %s\n' "$namespace"
			printf '%s\n' "current-context: walras-dev"
		} >"$path"
	)
}
