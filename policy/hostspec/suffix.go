package hostspec

// publicSuffixes lists suffixes under which unrelated parties register or
// claim names, so "*.<suffix>" would grant hosts anyone can create. It is a
// deliberately small, built-in excerpt of the Public Suffix List: the common
// two-label registry suffixes and the large hosting platforms. Single-label
// suffixes ("*.com") are refused separately. Names are in canonical form.
var publicSuffixes = map[string]struct{}{
	// Registry second-level suffixes.
	"ac.jp": {}, "ac.nz": {}, "ac.uk": {}, "ac.za": {},
	"co.id": {}, "co.il": {}, "co.in": {}, "co.jp": {}, "co.kr": {}, "co.nz": {}, "co.th": {}, "co.uk": {}, "co.za": {},
	"com.ar": {}, "com.au": {}, "com.br": {}, "com.cn": {}, "com.co": {}, "com.hk": {}, "com.mx": {}, "com.my": {},
	"com.ng": {}, "com.ph": {}, "com.pk": {}, "com.sg": {}, "com.tr": {}, "com.tw": {}, "com.ua": {}, "com.vn": {},
	"edu.au": {}, "edu.cn": {}, "gov.au": {}, "gov.cn": {}, "gov.uk": {}, "gov.in": {},
	"ltd.uk": {}, "me.uk": {}, "ne.jp": {}, "net.au": {}, "net.br": {}, "net.cn": {}, "net.in": {}, "net.nz": {},
	"nhs.uk": {}, "or.jp": {}, "or.kr": {}, "org.au": {}, "org.br": {}, "org.cn": {}, "org.in": {}, "org.nz": {},
	"org.uk": {}, "org.za": {}, "plc.uk": {}, "sch.uk": {},
	// Hosting platforms where anyone can claim a subdomain.
	"amazonaws.com": {}, "appspot.com": {}, "azurewebsites.net": {}, "blogspot.com": {}, "cloudfront.net": {},
	"duckdns.org": {}, "firebaseapp.com": {}, "fly.dev": {}, "github.io": {}, "gitlab.io": {},
	"glitch.me": {}, "herokuapp.com": {}, "netlify.app": {}, "ngrok-free.app": {}, "ngrok.app": {},
	"ngrok.io": {}, "onrender.com": {}, "pages.dev": {}, "s3.amazonaws.com": {}, "trycloudflare.com": {},
	"vercel.app": {}, "web.app": {}, "workers.dev": {},
}

// isPublicSuffix reports whether name, in canonical form, is on the list.
func isPublicSuffix(name string) bool {
	_, ok := publicSuffixes[name]
	return ok
}
