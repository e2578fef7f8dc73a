package rdma

import (
	"strings"
	"testing"
)

// TestLoadLibs loads the verbs libraries by name: a missing one is an
// error that names it and says what to install; the real ones resolve
// every function, and a stub then calls into the library.
func TestLoadLibs(t *testing.T) {
	tests := []struct {
		name      string
		verbs, cm string
		wantErr   []string // substrings of the error; nil: no error
	}{
		{"no libibverbs", "libibverbs-missing.so.1", cmLib, []string{"cannot load the RDMA libraries", "libibverbs-missing.so.1", "install"}},
		{"no librdmacm", verbsLib, "librdmacm-missing.so.1", []string{"cannot load the RDMA libraries", "librdmacm-missing.so.1", "install"}},
		{"installed", verbsLib, cmLib, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := loadLibs(tt.verbs, tt.cm)
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("loadLibs(%q, %q) = %v, want nil (make deps installs rdma-core)", tt.verbs, tt.cm, err)
				}
				// 10 is IBV_WC_REM_ACCESS_ERR: ibv_wc_status_str, through its stub.
				if got, want := wcError(10), "remote access error"; got != want {
					t.Errorf("wcError(10) = %q, want %q", got, want)
				}
				return
			}
			if err == nil {
				t.Fatalf("loadLibs(%q, %q) = nil, want an error", tt.verbs, tt.cm)
			}
			for _, s := range tt.wantErr {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("loadLibs(%q, %q) = %q, want it to contain %q", tt.verbs, tt.cm, err, s)
				}
			}
		})
	}
}
