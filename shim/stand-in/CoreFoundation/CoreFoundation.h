// stand-in for <CoreFoundation/CoreFoundation.h>: syntax checks only (see ../README.md)
#ifndef STANDIN_COREFOUNDATION_H
#define STANDIN_COREFOUNDATION_H
#include <stddef.h>
#include <stdint.h>
typedef const void *CFTypeRef;
typedef const struct __CFString *CFStringRef;
typedef const struct __CFDictionary *CFDictionaryRef;
typedef long CFIndex;
CFTypeRef CFRetain(CFTypeRef cf);
void CFRelease(CFTypeRef cf);
#endif
