// stand-in for <IOSurface/IOSurface.h> (IOSurfaceRef.h): syntax checks
// only (see ../README.md)
#ifndef STANDIN_IOSURFACE_H
#define STANDIN_IOSURFACE_H
#include <CoreFoundation/CoreFoundation.h>
#include <stddef.h>
#include <stdint.h>
typedef struct __IOSurface *IOSurfaceRef;
typedef uint32_t IOSurfaceID;
typedef int kern_return_t;
typedef unsigned int mach_port_t;
typedef enum {
	kIOSurfaceLockReadOnly = 0x00000001,
	kIOSurfaceLockAvoidSync = 0x00000002,
} IOSurfaceLockOptions;
extern const CFStringRef kIOSurfaceAllocSize;
extern const CFStringRef kIOSurfaceWidth;
extern const CFStringRef kIOSurfaceHeight;
extern const CFStringRef kIOSurfaceBytesPerRow;
extern const CFStringRef kIOSurfaceBytesPerElement;
extern const CFStringRef kIOSurfacePixelFormat;
IOSurfaceRef IOSurfaceCreate(CFDictionaryRef properties);
IOSurfaceRef IOSurfaceLookup(IOSurfaceID csid);
IOSurfaceID IOSurfaceGetID(IOSurfaceRef buffer);
kern_return_t IOSurfaceLock(IOSurfaceRef buffer, IOSurfaceLockOptions options, uint32_t *seed);
kern_return_t IOSurfaceUnlock(IOSurfaceRef buffer, IOSurfaceLockOptions options, uint32_t *seed);
size_t IOSurfaceGetAllocSize(IOSurfaceRef buffer);
void *IOSurfaceGetBaseAddress(IOSurfaceRef buffer);
mach_port_t IOSurfaceCreateMachPort(IOSurfaceRef buffer);
IOSurfaceRef IOSurfaceLookupFromMachPort(mach_port_t port);
#endif
