"""Reading a cubin's ELF without tools: its full length, section sizes, kernels and target SM
(:func:`fraglab.toolchain.compile`'s builds; nvdisasm costs ~0.5 s of CPU a run)."""
from __future__ import annotations

import struct

from .tools import ToolchainError


def _complete_elf(data: bytes) -> bytes:
    """Pad a cubin to the length its own ELF headers give.

    CuPy's ``getCUBIN`` returns the buffer one byte short (it treats the size as a C string's and
    drops the last byte), and nvdisasm then calls the file invalid. Rather than assume how many
    bytes are missing, read the ELF64 section and program header tables and pad with zeros to their end.
    """
    if data[:4] != b"\x7fELF" or data[4] != 2:
        raise ToolchainError("NVRTC returned something that is not a 64-bit ELF cubin")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    phoff, = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    end = max(shoff + shentsize * shnum, phoff + phentsize * phnum)
    for i in range(shnum):
        off = shoff + i * shentsize
        if off + shentsize > len(data):
            break
        sh_type, = struct.unpack_from("<I", data, off + 4)
        sh_offset, sh_size = struct.unpack_from("<QQ", data, off + 24)
        if sh_type != 8:  # SHT_NOBITS occupies no file space
            end = max(end, sh_offset + sh_size)
    return data + b"\x00" * max(0, end - len(data))


def _section_headers(cubin: bytes):
    """The ELF64 section headers of a cubin: ``(name offset, type, file offset, size, link,
    entry size)`` each, in order."""
    shoff, = struct.unpack_from("<Q", cubin, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", cubin, 0x3A)
    for i in range(shnum):
        sh = shoff + i * shentsize
        name_off, sh_type = struct.unpack_from("<II", cubin, sh)
        offset, size = struct.unpack_from("<QQ", cubin, sh + 24)
        link, = struct.unpack_from("<I", cubin, sh + 40)
        entsize, = struct.unpack_from("<Q", cubin, sh + 56)
        yield name_off, sh_type, offset, size, link, entsize


def _string(cubin: bytes, start: int) -> str:
    return cubin[start:cubin.index(b"\0", start)].decode()


def elf_sections(cubin: bytes) -> dict[str, int]:
    """``{section name: size in bytes}`` of a cubin, from its ELF section headers."""
    headers = list(_section_headers(cubin))
    shstrndx, = struct.unpack_from("<H", cubin, 0x3E)
    names = headers[shstrndx][2]
    return {_string(cubin, names + h[0]): h[3] for h in headers}


#: ``st_other`` bit of a kernel's symbol in a cubin (nvdisasm prints it as ``STO_CUDA_ENTRY``).
_STO_CUDA_ENTRY = 0x10
_SHT_SYMTAB, _STT_FUNC = 2, 2


def elf_kernels(cubin: bytes) -> list[str]:
    """Names of the kernels (entry points) in a cubin: its function symbols marked
    ``STO_CUDA_ENTRY``. Device functions that were not inlined (a :data:`FAST_BUILD` keeps
    many) have code sections too, but are no kernels."""
    headers = list(_section_headers(cubin))
    out = []
    for _, sh_type, offset, size, link, entsize in headers:
        if sh_type != _SHT_SYMTAB:
            continue
        strtab = headers[link][2]
        for j in range(size // entsize):
            name_off, info, other = struct.unpack_from("<IBB", cubin, offset + j * entsize)
            if info & 0xF == _STT_FUNC and other & _STO_CUDA_ENTRY:
                out.append(_string(cubin, strtab + name_off))
    return sorted(out)


_STT_OBJECT = 1


def elf_int_globals(cubin: bytes) -> dict[str, int]:
    """``{name: value}`` of the 4-byte data symbols of a cubin's global memory: what
    ``extern "C" __device__ const int NAME = value;`` compiles to (section ``.nv.global.init``,
    or ``.nv.global`` where the value is 0). Signed 32-bit, little-endian."""
    headers = list(_section_headers(cubin))
    shstrndx, = struct.unpack_from("<H", cubin, 0x3E)
    names = headers[shstrndx][2]
    section = {i: _string(cubin, names + h[0]) for i, h in enumerate(headers)}
    init = {i for i, n in section.items() if n == ".nv.global.init"}
    zero = {i for i, n in section.items() if n == ".nv.global"}      # = 0: no bytes in the file
    out = {}
    for _, sh_type, offset, size, link, entsize in headers:
        if sh_type != _SHT_SYMTAB:
            continue
        strtab = headers[link][2]
        for j in range(size // entsize):
            sym = offset + j * entsize
            name_off, info, _other, shndx = struct.unpack_from("<IBBH", cubin, sym)
            value, sym_size = struct.unpack_from("<QQ", cubin, sym + 8)
            if info & 0xF == _STT_OBJECT and shndx in init | zero and sym_size == 4:
                at = headers[shndx][2] + value
                out[_string(cubin, strtab + name_off)] = \
                    struct.unpack_from("<i", cubin, at)[0] if shndx in init else 0
    return out


def elf_sm(cubin: bytes) -> int:
    """The SM a cubin is for (75, 80, 90, 120), from its ELF header: the CUDA ELF ABI 7 keeps it
    in the low byte of ``e_flags``, ABI 8 (sm_100 on) in the next one. What nvdisasm prints as
    ``EF_CUDA_SM<n>``, without starting nvdisasm (about 0.6 s of CPU a run)."""
    if cubin[:4] != b"\x7fELF":
        raise ToolchainError("not an ELF cubin")
    flags, = struct.unpack_from("<I", cubin, 0x30)
    abi = cubin[8]
    if abi == 7:
        return flags & 0xFF
    if abi == 8:
        return (flags >> 8) & 0xFF
    raise ToolchainError(f"a cubin of CUDA ELF ABI version {abi}, which fraglab does not read")
