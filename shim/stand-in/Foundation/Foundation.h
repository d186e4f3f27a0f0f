// stand-in for <Foundation/Foundation.h>: the classes and methods the shim
// uses, with the SDK's signatures (syntax checks only, see ../README.md)
#ifndef STANDIN_FOUNDATION_H
#define STANDIN_FOUNDATION_H
#include <CoreFoundation/CoreFoundation.h>
#include <objc/objc.h>
#include <stddef.h>

typedef unsigned long NSUInteger;
typedef long NSInteger;
#define NS_ENUM(type, name)                                                                                            \
	enum name : type name;                                                                                         \
	enum name : type
#define NS_OPTIONS(type, name)                                                                                         \
	enum name : type name;                                                                                         \
	enum name : type

@class NSString, NSDictionary, NSError, NSURL;

@protocol NSObject
- (BOOL)isKindOfClass:(Class)aClass;
- (BOOL)respondsToSelector:(SEL)aSelector;
- (NSString *)description;
@end

@protocol NSCopying
@end

typedef struct {
	unsigned long state;
	__unsafe_unretained id *itemsPtr;
	unsigned long *mutationsPtr;
	unsigned long extra[5];
} NSFastEnumerationState;

@protocol NSFastEnumeration
- (NSUInteger)countByEnumeratingWithState:(NSFastEnumerationState *)state
				  objects:(__unsafe_unretained id[])buffer
				    count:(NSUInteger)len;
@end

__attribute__((objc_root_class))
@interface NSObject<NSObject> {
	Class isa;
}
+ (instancetype)alloc;
+ (instancetype)new;
- (instancetype)init;
+ (Class)class;
- (Class)class;
@end

@interface NSString : NSObject <NSCopying>
+ (instancetype)stringWithUTF8String:(const char *)s;
+ (instancetype)stringWithFormat:(NSString *)format, ...;
@property(readonly) NSUInteger length;
@property(readonly) const char *UTF8String;
@property(readonly) const char *fileSystemRepresentation;
- (NSString *)stringByAppendingPathComponent:(NSString *)str;
@end

@interface NSNumber : NSObject <NSCopying>
+ (NSNumber *)numberWithInt:(int)value;
+ (NSNumber *)numberWithUnsignedInt:(unsigned int)value;
+ (NSNumber *)numberWithLong:(long)value;
+ (NSNumber *)numberWithUnsignedLong:(unsigned long)value;
+ (NSNumber *)numberWithLongLong:(long long)value;
+ (NSNumber *)numberWithUnsignedLongLong:(unsigned long long)value;
+ (NSNumber *)numberWithBool:(BOOL)value;
@property(readonly) NSUInteger unsignedIntegerValue;
@end

typedef NS_OPTIONS(NSUInteger, NSDataReadingOptions) {
	NSDataReadingMappedIfSafe = 1UL << 0,
	NSDataReadingUncached = 1UL << 1,
	NSDataReadingMappedAlways = 1UL << 3,
};
typedef NS_OPTIONS(NSUInteger, NSDataWritingOptions) {
	NSDataWritingAtomic = 1UL << 0,
};

@interface NSData : NSObject <NSCopying>
+ (instancetype)data;
+ (instancetype)dataWithBytes:(const void *)bytes length:(NSUInteger)length;
+ (instancetype)dataWithBytesNoCopy:(void *)bytes length:(NSUInteger)length freeWhenDone:(BOOL)b;
+ (instancetype)dataWithContentsOfFile:(NSString *)path
			       options:(NSDataReadingOptions)readOptionsMask
				 error:(NSError **)errorPtr;
@property(readonly) const void *bytes;
@property(readonly) NSUInteger length;
- (BOOL)writeToFile:(NSString *)path options:(NSDataWritingOptions)writeOptionsMask error:(NSError **)errorPtr;
@end

@interface NSArray<ObjectType> : NSObject <NSCopying, NSFastEnumeration>
+ (instancetype)arrayWithObjects:(const ObjectType[])objects count:(NSUInteger)cnt;
@property(readonly) NSUInteger count;
- (ObjectType)objectAtIndexedSubscript:(NSUInteger)idx;
@end

@interface NSMutableArray<ObjectType> : NSArray <ObjectType>
+ (instancetype)array;
- (void)addObject:(ObjectType)anObject;
@end

@interface NSDictionary<KeyType, ObjectType> : NSObject <NSCopying, NSFastEnumeration>
+ (instancetype)dictionaryWithObjects:(const ObjectType[])objects
			      forKeys:(const KeyType<NSCopying>[])keys
				count:(NSUInteger)cnt;
@property(readonly) NSUInteger count;
- (ObjectType)objectForKeyedSubscript:(KeyType)key;
@end

@interface NSMutableDictionary<KeyType, ObjectType> : NSDictionary <KeyType, ObjectType>
+ (instancetype)dictionary;
- (void)setObject:(ObjectType)obj forKeyedSubscript:(KeyType<NSCopying>)key;
@end

@interface NSError : NSObject
@property(readonly, copy) NSString *domain;
@property(readonly) NSInteger code;
@property(readonly, copy) NSString *localizedDescription;
@end

@interface NSURL : NSObject
+ (instancetype)fileURLWithPath:(NSString *)path;
@property(readonly, copy) NSString *path;
@end

@interface NSFileManager : NSObject
@property(class, readonly, strong) NSFileManager *defaultManager;
- (BOOL)createDirectoryAtPath:(NSString *)path
	withIntermediateDirectories:(BOOL)createIntermediates
			 attributes:(NSDictionary *)attributes
			      error:(NSError **)error;
- (BOOL)removeItemAtPath:(NSString *)path error:(NSError **)error;
- (BOOL)copyItemAtPath:(NSString *)srcPath toPath:(NSString *)dstPath error:(NSError **)error;
- (BOOL)moveItemAtPath:(NSString *)srcPath toPath:(NSString *)dstPath error:(NSError **)error;
@end

NSString *NSTemporaryDirectory(void);
Class NSClassFromString(NSString *aClassName);
NSString *NSStringFromClass(Class aClass);
#endif
