/*
 * Minimal stand-in for Windows' bcryptprimitives.dll, for running corral's
 * x86_64-pc-windows-gnu builds under Wine 8, which does not ship that DLL.
 *
 * Rust's standard library (1.78+) imports ProcessPrng from bcryptprimitives.dll
 * to seed HashMap keys and similar; without this DLL every Rust .exe fails to
 * load under Wine 8 with STATUS_DLL_NOT_FOUND (c0000135).
 *
 * Only ProcessPrng is provided.  It draws from the system-preferred RNG via
 * bcrypt.dll's BCryptGenRandom, which Wine does implement.
 *
 * Build (see .ci/wine-setup.sh):
 *   x86_64-w64-mingw32-gcc -shared -O2 -o bcryptprimitives.dll \
 *       bcryptprimitives.c bcryptprimitives.def -lbcrypt
 */
#include <windows.h>
#include <bcrypt.h>

#ifndef BCRYPT_USE_SYSTEM_PREFERRED_RNG
#define BCRYPT_USE_SYSTEM_PREFERRED_RNG 0x00000002
#endif
#ifndef BCRYPT_SUCCESS
#define BCRYPT_SUCCESS(status) (((NTSTATUS)(status)) >= 0)
#endif

/* BCryptGenRandom takes a ULONG (32-bit) count, while ProcessPrng takes a
 * SIZE_T, so large requests are served in pieces. */
#define CHUNK_MAX ((SIZE_T)0x40000000u)

BOOL WINAPI ProcessPrng(PBYTE buf, SIZE_T len)
{
    while (len > 0) {
        ULONG piece = (ULONG)(len > CHUNK_MAX ? CHUNK_MAX : len);
        NTSTATUS st = BCryptGenRandom(NULL, buf, piece,
                                      BCRYPT_USE_SYSTEM_PREFERRED_RNG);
        if (!BCRYPT_SUCCESS(st)) {
            return FALSE;
        }
        buf += piece;
        len -= piece;
    }
    return TRUE;
}

BOOL WINAPI DllMain(HINSTANCE inst, DWORD reason, LPVOID reserved)
{
    (void)inst;
    (void)reason;
    (void)reserved;
    return TRUE;
}
